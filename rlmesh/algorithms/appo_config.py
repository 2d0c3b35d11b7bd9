"""APPOConfig: APPO's own settings (clipped surrogate, target network, KL term, and the
advantage estimator of ``vtrace=False``) on top of IMPALA's, in RLlib's names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rlmesh.config.base import setting
from rlmesh.algorithms.gae_config import GAESettings
from rlmesh.algorithms.impala_config import ImpalaConfig

# RLlib's APPOConfig.__init__ values for settings IMPALA already declares.
_APPO_DEFAULTS = {"learner_queue_size": 16}


@dataclass(kw_only=True)
class APPOConfig(ImpalaConfig, GAESettings, defaults=_APPO_DEFAULTS):
    """Asynchronous PPO, configured as in RLlib::

        APPOConfig().environment("CartPole-v1").training(clip_param=0.4, use_kl_loss=True)

    ``use_critic``, ``use_gae`` and ``lambda`` (RLlib's defaults: True, True, 1.0) are read
    with ``vtrace=False`` only; V-trace has its own targets.
    """

    algorithm_path = "rlmesh.algorithms.appo.appo:APPO"

    clip_param: float = setting(
        0.4, "training", gt=0,
        doc="The surrogate's ratio to the target network is clipped to [1 - clip_param, "
            "1 + clip_param].")
    target_network_update_freq: int = setting(
        1, "training", ge=1,
        doc="Updates between two copies of the policy into the target network.")
    surrogate_anchor: Literal["auto", "target", "behaviour"] = setting(
        "auto", "training",
        doc="With vtrace=True, the policy the surrogate's ratio (and the KL term) refers to: "
            "'target' (RLlib's APPO): the target network, reached through the behaviour "
            "policy as pi/mu * clip(mu/target, 0, 2); 'behaviour': the policy that sampled "
            "each action (pi/mu, as PPO), V-trace still correcting the value targets and "
            "advantages toward the target network; 'auto': 'behaviour' for Box (Gaussian) "
            "actions, 'target' for the others. A Gaussian's density ratio at a stale action "
            "is far from 1, so against the target network the clip stops bounding the "
            "update and the policy collapses (docs/benchmark_log.md, 'V-trace on continuous "
            "actions'). vtrace=False always uses the behaviour policy.")
    use_kl_loss: bool = setting(
        False, "training",
        doc="Add kl_coeff x KL(target network || policy) to the loss, kl_coeff adapting "
            "toward kl_target.")
    kl_coeff: float = setting(1.0, "training", ge=0, doc="Initial coefficient of the KL term.")
    kl_target: float = setting(
        0.01, "training", gt=0,
        doc="KL per update that the adaptive kl_coeff aims for: x1.5 above twice the "
            "target, x0.5 below half of it.")

    def _cross_checks(self) -> list[str]:
        problems = super()._cross_checks()
        if not self.vtrace:  # as RLlib, which checks them where it computes GAE
            problems += self._gae_problems()
        return problems
