"""RLlib's ray.rllib.agents.impala.vtrace_tf_policy: refused in one line naming the torch policy."""

from rlmesh.agents._exports import tf_policy_module

__getattr__ = tf_policy_module(__name__, {
    "VTraceTFPolicy": "rlmesh.agents.impala.vtrace_torch_policy.VTraceTorchPolicy"})
