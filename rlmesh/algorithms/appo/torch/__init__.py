"""RLlib's ``ray.rllib.algorithms.appo.torch``: APPO's default RLModule."""

from rlmesh.models.default_modules import APPOTorchRLModule, DefaultAPPOTorchRLModule

__all__ = ["APPOTorchRLModule", "DefaultAPPOTorchRLModule"]
