"""RLlib's ``ray.rllib.algorithms.dqn.torch``: DQN's default RLModule."""

from rlmesh.models.default_modules import DefaultDQNTorchRLModule

__all__ = ["DefaultDQNTorchRLModule"]
