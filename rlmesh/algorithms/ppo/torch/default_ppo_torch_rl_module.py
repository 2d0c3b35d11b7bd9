"""RLlib's ``ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module`` (rlmesh/models/default_modules.py)."""

from rlmesh.models.default_modules import DefaultPPOTorchRLModule, PPOTorchRLModule

__all__ = ["DefaultPPOTorchRLModule", "PPOTorchRLModule"]
