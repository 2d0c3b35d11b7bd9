"""RLlib's ``ray.rllib.core.rl_module.torch`` (rlmesh/models/torch_rl_module.py)."""

from rlmesh.models.torch_rl_module import TorchRLModule

__all__ = ["TorchRLModule"]
