"""PGConfig: vanilla policy gradient's settings, RLlib's defaults for the shared ones, and
the one rule PG adds: it learns from complete episodes only."""

from __future__ import annotations

from dataclasses import dataclass

from rlmesh.config.base import AlgorithmConfig, setting
from rlmesh.rl.spec import MODEL_DEFAULTS

# RLlib's PGConfig.__init__ values, except batch_mode (see _cross_checks).
_PG_DEFAULTS = {
    "lr": 0.0004,
    "train_batch_size": 200,
    "rollout_fragment_length": "auto",
    "batch_mode": "complete_episodes",
    "num_env_runners": 0,
    "model": dict(MODEL_DEFAULTS),
}


@dataclass(kw_only=True)
class PGConfig(AlgorithmConfig, defaults=_PG_DEFAULTS):
    """REINFORCE (Williams 1992), configured as in RLlib::

        PGConfig().environment("CartPole-v1").training(lr=0.0004, train_batch_size=200)
    """

    #: The algorithm build() makes from this config.
    algorithm_path = "rlmesh.algorithms.pg:PG"

    standardize_returns: bool = setting(
        False, "training",
        doc="Scale each train batch's discounted returns to zero mean and unit variance "
            "before they weight the log-probabilities: a baseline (the batch mean) that "
            "lowers the gradient's variance. RLlib's PG does not; CartPole learns "
            "without it (docs/benchmark_log.md, 'PG, A2C, A3C learning').")

    def _cross_checks(self) -> list[str]:
        problems = super()._cross_checks()
        # Without a critic nothing can stand in for the rewards after a cut fragment.
        if self.batch_mode != "complete_episodes":
            problems.append("batch_mode: PG weights each action by the discounted return of "
                            "the rest of its episode, so it needs 'complete_episodes' (there "
                            "is no value function to bootstrap a cut episode); got "
                            f"{self.batch_mode!r}")
        return problems
