"""RLlib's ``ray.rllib.algorithms.ppo.torch``: PPO's default RLModule."""

from rlmesh.models.default_modules import DefaultPPOTorchRLModule, PPOTorchRLModule

__all__ = ["DefaultPPOTorchRLModule", "PPOTorchRLModule"]
