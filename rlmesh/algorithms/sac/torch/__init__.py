"""RLlib's ``ray.rllib.algorithms.sac.torch``: SAC's default RLModule."""

from rlmesh.models.default_modules import DefaultSACTorchRLModule

__all__ = ["DefaultSACTorchRLModule"]
