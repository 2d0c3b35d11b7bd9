"""The settings every algorithm shares (``AlgorithmConfig``), the machinery that declares each
one once, and schedules. Below roles and algorithms: roles read a config, algorithms extend it."""

from rlmesh.config.base import AlgorithmConfig
from rlmesh.config.settings import ConfigError, setting

__all__ = ["AlgorithmConfig", "ConfigError", "setting"]
