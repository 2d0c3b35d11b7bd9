"""RLlib's ray.rllib.agents.a3c.a3c_torch_policy: A3C's torch policy (today
rlmesh.algorithms.a3c.A3CTorchPolicy)."""

from rlmesh.algorithms.a3c import A3CTorchPolicy

__all__ = ["A3CTorchPolicy"]
