"""RLlib's ray.rllib.agents.impala.vtrace_torch_policy: IMPALA's torch policy (today
rlmesh.algorithms.impala.ImpalaTorchPolicy)."""

from rlmesh.algorithms.impala import ImpalaTorchPolicy as VTraceTorchPolicy

__all__ = ["VTraceTorchPolicy"]
