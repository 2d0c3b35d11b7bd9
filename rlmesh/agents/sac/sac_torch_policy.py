"""RLlib's ray.rllib.agents.sac.sac_torch_policy: SAC's torch policy (today
rlmesh.algorithms.sac.SACTorchPolicy)."""

from rlmesh.algorithms.sac import SACTorchPolicy

__all__ = ["SACTorchPolicy"]
