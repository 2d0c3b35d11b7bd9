"""APPOConfig: APPO's own settings (clipped surrogate, target network, KL term, and the
advantage estimator of ``vtrace=False``) on top of IMPALA's, in RLlib's names."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from rlmesh.config.base import setting
from rlmesh.rl.spec import MODEL_DEFAULTS, has_image
from rlmesh.algorithms.gae_config import GAESettings
from rlmesh.algorithms.impala_config import ImpalaConfig

# rlmesh's APPO is tuned for what a user types first (issue 54: ``rlmesh train --run APPO
# --env CartPole-v1``); RLlib's values are config/rllib_defaults.py's RLLIB_APPO, what RLlib's
# files and ``--defaults rllib`` get. Measured on CartPole to 475, seeds 0-2 (2-core VM,
# docs/benchmark_log.md "APPO's defaults"): RLlib's values had not reached it at 400k (204 at
# 456k; 431 at 1.08M in an earlier run); these took 97k-110k. Each batch is trained on
# several times, as PPO does, so the pipeline is kept short and the ratio is PPO's:
_APPO_DEFAULTS = {
    # num_epochs, minibatch_size and entropy_coeff: 'auto', by the observations (the fields
    # below, and _BY_OBSERVATIONS).
    # 256-step batches of 32-step fragments (500 of 50): a fresher policy samples each
    # batch (97k-110k; 128-step batches 130k-203k).
    "train_batch_size": 256,
    "rollout_fragment_length": 32,
    # One batch waiting and one fragment in flight per runner (16 and 2): runners wait for
    # the learner instead of sampling ahead of it with a policy 50-90 updates old.
    "learner_queue_size": 1,
    "max_sample_requests_in_flight_per_worker": 1,
    # (The ratio to the policy that sampled, surrogate_anchor below, goes with the passes.)
    # The passes inside one update, as PPO's (RLlib's APPO, and IMPALA: each pass an
    # update of its own, replayed from the minibatch buffer): the targets, the target
    # network's sync and the weights' broadcast once per batch, not once per pass. An
    # update of 256 env steps (8 passes of minibatches of 32, one thread): 91-104 ms
    # against 134-147 ms; CartPole to 475, seeds 0-2: 0.47 s per 1,000 env steps against
    # 0.72 (docs/benchmark_log.md, "APPO's passes inside one update").
    "epochs_in_update": True,
    # twice RLlib's 5e-4, a [64, 64] value branch of its own (RLlib's [256, 256] shared):
    # cartpole-appo.yaml's measured values.
    "lr": 1e-3,
    "model": {**MODEL_DEFAULTS, "fcnet_hiddens": [64, 64], "vf_share_layers": False},
    # 1 s iterations (10): results, and stop rules, every second.
    "min_time_s_per_iteration": 1.0,
}


# The defaults that depend on the observations, as (vector observations, images): what
# 'auto' resolves to once the env's spaces are known (for_observations). Vectors (an MLP):
# CartPole's measured values. 6 passes since the advantages lost V-trace's second importance
# weight and the batches their extra lag (docs/benchmark_log.md, "APPO: one importance
# weight, one batch ahead": seeds 0-5, 60k-75k env steps, mean 66k, 19-24 s; 8 passes
# 55k-116k, mean 85k, 22-45 s; minibatches of 64, 57k-85k, mean 73k). Before that: 8 passes
# over each batch, as PPO's epochs (4 passes with a
# queue of 2: 123k-409k env steps to 475), in minibatches of 32 (RLlib's: the whole batch):
# 64 gradient steps per 256 env steps (PPO's defaults: 160 per 2048; SB3's rl-zoo CartPole:
# 20 per 256); seeds 0-5: 54k-78k env steps, mean 66k (whole batches 97k-118k; 64: 80k-87k
# on seeds 0-2; 32 at 4 or 6 passes: 96k-148k, 65k-145k); no entropy bonus (0.01: 139k and
# 142k on seeds 0-1). Images (a conv net): RLlib's values. On MinAtar Breakout the vectors'
# values made the learner the bottleneck (350 env steps/s against 2,200-2,800) and the policy
# deterministic (entropy < 0.025 by 30k env steps), for no better return at 200k
# (docs/benchmark_log.md, "APPO's defaults on MinAtar Breakout").
# clip_param: PPO's 0.2 (SB3's) for vectors, RLlib's 0.4 for images. CartPole to 475 with
# the other defaults, 2-core VM (docs/benchmark_log.md, "APPO's clip, twelve seeds beside
# SB3, ..."): 0.4 over 18 runs of seeds 0-5, 69.4k env steps on average; 0.2 over 12 runs,
# 64.0k; 0.3 over 6, 82.8k. Then seeds 0-11 beside SB3's PPO: 63.4k against its 71.4k.
_BY_OBSERVATIONS: dict[str, tuple[object, object]] = {
    "num_epochs": (6, 1),
    "minibatch_size": (32, None),
    "entropy_coeff": (0.0, 0.01),
    "clip_param": (0.2, 0.4),
}


def _auto(name: str, doc: str) -> Any:
    """ImpalaConfig's setting ``name`` declared again with the default 'auto' (the type
    widened where it is declared): the same group, key, aliases and bounds."""
    meta = {f.name: f for f in dataclasses.fields(ImpalaConfig)}[name].metadata
    return setting("auto", meta["group"], doc=doc, key=meta["key"], aliases=meta["aliases"],
                   ge=meta["ge"], gt=meta["gt"], le=meta["le"], merge=meta["merge"])


@dataclass(kw_only=True)
class APPOConfig(ImpalaConfig, GAESettings, defaults=_APPO_DEFAULTS):
    """Asynchronous PPO, configured as in RLlib::

        APPOConfig().environment("CartPole-v1").training(clip_param=0.4, use_kl_loss=True)

    ``use_critic``, ``use_gae`` and ``lambda`` (RLlib's defaults: True, True, 1.0) are read
    with ``vtrace=False`` only; V-trace has its own targets.
    """

    algorithm_path = "rlmesh.algorithms.appo.appo:APPO"

    clip_param: float | Literal["auto"] = setting(
        "auto", "training", gt=0,
        doc="The surrogate's ratio (to the policy surrogate_anchor names) is clipped to "
            "[1 - clip_param, 1 + clip_param]. 'auto' (RLlib's default: 0.4): 0.2, PPO's, "
            "for vector observations, 0.4 for images (a conv net), resolved when the env's "
            "spaces are known.")
    target_network_update_freq: int = setting(
        1, "training", ge=1,
        doc="Updates between two copies of the policy into the target network.")
    # 'behaviour' (RLlib's: the target network, 'auto' here). Over num_epochs 8 the target
    # network moves with every update, so its clip bounds nothing across the passes (one
    # CartPole seed of 3 collapsed to a return of 9 at 405k env steps; 161k and 175k the
    # others, against 97k-110k).
    surrogate_anchor: Literal["auto", "target", "behaviour"] = setting(
        "behaviour", "training",
        doc="With vtrace=True, the policy the surrogate's ratio (and the KL term) refers to: "
            "'target' (RLlib's APPO): the target network, reached through the behaviour "
            "policy as pi/mu * clip(mu/target, 0, 2); 'behaviour': the policy that sampled "
            "each action (pi/mu, as PPO), V-trace still correcting the value targets and "
            "advantages toward the target network; 'auto': 'behaviour' for Box (Gaussian) "
            "actions, 'target' for the others. A Gaussian's density ratio at a stale action "
            "is far from 1, so against the target network the clip stops bounding the "
            "update and the policy collapses (docs/benchmark_log.md, 'V-trace on continuous "
            "actions'). vtrace=False always uses the behaviour policy. Default 'behaviour' "
            "(RLlib's defaults: 'auto'): with num_epochs > 1 the target network moves with "
            "every pass, so its clip would not bound the passes together.")
    vtrace_pg_rho: bool | Literal["auto"] = setting(
        "auto", "training",
        doc="Whether V-trace's policy-gradient advantages are weighted by pi/mu clipped at "
            "vtrace_clip_pg_rho_threshold (RLlib's APPO, and IMPALA, always). 'auto': only "
            "when the surrogate's ratio is to the target network; with the behaviour anchor "
            "the ratio pi/mu already weighs each sample to the behaviour policy, and the "
            "second weight discounted every action the policy has since made less likely "
            "(CartPole to 475 with APPO's defaults, seeds 0-2: 60k-68k env steps without it, "
            "69k-122k with it; docs/benchmark_log.md, 'APPO: one importance weight, one "
            "batch ahead'). RLlib's defaults: True.")
    use_kl_loss: bool = setting(
        False, "training",
        doc="Add kl_coeff x KL(target network || policy) to the loss, kl_coeff adapting "
            "toward kl_target.")
    kl_coeff: float = setting(1.0, "training", ge=0, doc="Initial coefficient of the KL term.")
    kl_target: float = setting(
        0.01, "training", gt=0,
        doc="KL per update that the adaptive kl_coeff aims for: x1.5 above twice the "
            "target, x0.5 below half of it.")

    num_epochs: int | Literal["auto"] = _auto(
        "num_epochs",
        "Passes over each train batch (the learner replays each batch this many times). "
        "'auto' (RLlib's default: 1): 6 for vector observations, 1 for images (a conv "
        "net), resolved when the env's spaces are known.")
    minibatch_size: int | None | Literal["auto"] = _auto(
        "minibatch_size",
        "Env steps per gradient step; None: the whole train batch at once. 'auto' (RLlib's "
        "default: None): 32 for vector observations, the whole batch for images (a conv net).")
    entropy_coeff: float | Literal["auto"] = _auto(
        "entropy_coeff",
        "Weight of the entropy bonus subtracted from the loss. 'auto' (RLlib's default: "
        "0.01): 0 for vector observations, 0.01 for images (a conv net).")

    def for_observations(self, spaces: list[Any]) -> "APPOConfig":
        """This config with each 'auto' above resolved: the images' value when any of
        ``spaces`` (the policies' observation spaces) has an image a conv net reads, the
        vectors' otherwise; itself when nothing is 'auto'."""
        auto = [name for name in _BY_OBSERVATIONS if getattr(self, name) == "auto"]
        if not auto:
            return self
        images = any(has_image(space) for space in spaces)
        resolved = self.copy()
        for name in auto:
            setattr(resolved, name, _BY_OBSERVATIONS[name][images])
        return resolved

    def _cross_checks(self) -> list[str]:
        problems = super()._cross_checks()
        if not self.vtrace:  # as RLlib, which checks them where it computes GAE
            problems += self._gae_problems()
        return problems
