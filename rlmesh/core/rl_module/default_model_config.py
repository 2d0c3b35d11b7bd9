"""RLlib's ``ray.rllib.core.rl_module.default_model_config`` (rlmesh/models/default_model_config.py)."""

from rlmesh.models.default_model_config import DefaultModelConfig

__all__ = ["DefaultModelConfig"]
