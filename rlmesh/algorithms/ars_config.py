"""ARSConfig: Augmented Random Search's settings (Mania et al. 2018, ARS v2: a linear policy
on normalised observations) in RLlib's names; the noise settings come from EvolutionConfig."""

from __future__ import annotations

from dataclasses import dataclass

from rlmesh.algorithms.es_config import EvolutionConfig
from rlmesh.config.base import setting
from rlmesh.rl.spec import MODEL_DEFAULTS

# RLlib's ARSConfig.__init__ values, but for the observation filter: ARS v2 normalises
# observations (the "V2" of the paper), RLlib's default is NoFilter (ARS v1).
_ARS_DEFAULTS = {
    "eval_prob": 0.03,
    "action_noise_std": 0.0,
    "num_env_runners": 2,
    "model": {**MODEL_DEFAULTS, "fcnet_hiddens": []},  # linear, as in the paper
}


@dataclass(kw_only=True)
class ARSConfig(EvolutionConfig, defaults=_ARS_DEFAULTS):
    """ARS, configured as in RLlib::

        ARSConfig().environment("CartPole-v1").training(num_rollouts=50, rollouts_used=25)
    """

    #: The algorithm build() makes from this config.
    algorithm_path = "rlmesh.algorithms.ars:ARS"

    num_rollouts: int = setting(
        32, "training", ge=1,
        doc="Directions (mirrored pairs of episodes) evaluated per iteration.")
    rollouts_used: int = setting(
        32, "training", ge=1,
        doc="The best directions (by the better of their two returns) the step uses.")
    sgd_stepsize: float = setting(
        0.01, "training", gt=0,
        doc="Step size: theta += sgd_stepsize / (rollouts_used * std of the returns used) "
            "* sum of (r+ - r-) * e over the directions used.")
    offset: float = setting(
        0.0, "training",
        doc="Taken off every step's reward in the returns ARS trains on (the paper removes "
            "MuJoCo's alive bonus this way); reported returns are the env's.")

    def _cross_checks(self) -> list[str]:
        problems = super()._cross_checks()
        if self.rollouts_used > self.num_rollouts:
            problems.append(f"rollouts_used: at most num_rollouts ({self.num_rollouts}), got "
                            f"{self.rollouts_used}")
        return problems
