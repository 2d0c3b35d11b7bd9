"""RLlib's older ``ray.rllib.algorithms.sac.torch.sac_torch_rl_module`` (before 2.40)."""

from rlmesh.models.default_modules import DefaultSACTorchRLModule

#: RLlib's name before 2.40.
SACTorchRLModule = DefaultSACTorchRLModule

__all__ = ["DefaultSACTorchRLModule", "SACTorchRLModule"]
