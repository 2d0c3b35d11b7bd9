"""Algorithms: one readable file per algorithm, with its config, policy and training step."""

from typing import Any

from rlmesh.algorithms.ppo_config import PPOConfig
from rlmesh.driver.algorithm_registry import ALGORITHMS, get_algorithm_class, get_config_class
from rlmesh.config.base import AlgorithmConfig, ConfigError

__all__ = ["ALGORITHMS", "Algorithm", "AlgorithmConfig", "ConfigError", "PPO", "PPOConfig",
           "build_algorithm", "get_algorithm_class", "get_config_class"]

_LAZY = {"PPO": "rlmesh.algorithms.ppo.ppo", "Algorithm": "rlmesh.driver.algorithm",
         "build_algorithm": "rlmesh.algorithms.algorithm_template"}


def __getattr__(name: str) -> Any:
    # The algorithm classes pull in torch and the runtime: load them when first asked for.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(name)
