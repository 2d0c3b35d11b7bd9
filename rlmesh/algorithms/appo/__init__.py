"""APPO (rlmesh/algorithms/appo/appo.py) and, as in RLlib's ``ray.rllib.algorithms.appo``,
its default RLModule under ``torch/``."""

from rlmesh.algorithms.appo.appo import APPO, APPOConfig, APPOTorchPolicy, target_model

__all__ = ["APPO", "APPOConfig", "APPOTorchPolicy", "target_model"]
