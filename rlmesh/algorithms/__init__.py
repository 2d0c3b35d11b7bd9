"""Algorithms: one readable file per algorithm, with its config, loss and topology."""

from rlmesh.algorithms.config import AlgorithmConfig, ConfigError
from rlmesh.algorithms.ppo_config import PPOConfig

__all__ = ["AlgorithmConfig", "ConfigError", "PPOConfig"]
