"""RLlib's ``ray.rllib.algorithms.sac.torch.default_sac_torch_rl_module`` (the class:
rlmesh/models/default_modules.py)."""

from rlmesh.models.default_modules import DefaultSACTorchRLModule

__all__ = ["DefaultSACTorchRLModule"]
