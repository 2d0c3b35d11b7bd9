"""RLlib's ray.rllib.agents.ppo.appo_torch_policy: APPO's torch policy (today
rlmesh.algorithms.appo.APPOTorchPolicy)."""

from rlmesh.algorithms.appo import APPOTorchPolicy

__all__ = ["APPOTorchPolicy"]
