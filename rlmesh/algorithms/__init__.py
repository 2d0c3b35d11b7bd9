"""Algorithms: one readable file per algorithm, with its config, loss and topology."""

from typing import Any

from rlmesh.algorithms.config import AlgorithmConfig, ConfigError
from rlmesh.algorithms.ppo_config import PPOConfig

#: Algorithms by the name `rlmesh train --run NAME` takes.
ALGORITHMS = {"PPO": "rlmesh.algorithms.ppo:PPO"}

__all__ = ["ALGORITHMS", "Algorithm", "AlgorithmConfig", "ConfigError", "PPO", "PPOConfig"]


def __getattr__(name: str) -> Any:
    # The algorithm classes pull in torch and the runtime: load them when first asked for.
    if name == "PPO":
        from rlmesh.algorithms.ppo import PPO

        return PPO
    if name == "Algorithm":
        from rlmesh.algorithms.algorithm import Algorithm

        return Algorithm
    raise AttributeError(name)
