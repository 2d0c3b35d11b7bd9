"""RLlib's ``ray.rllib.algorithms.appo.torch.appo_torch_rl_module`` (rlmesh/models/default_modules.py)."""

from rlmesh.models.default_modules import APPOTorchRLModule, DefaultAPPOTorchRLModule

__all__ = ["APPOTorchRLModule", "DefaultAPPOTorchRLModule"]
