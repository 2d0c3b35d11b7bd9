"""RLlib's ray.rllib.agents.ppo.ppo_tf_policy: refused in one line naming the torch policy."""

from rlmesh.agents._exports import tf_policy_module

__getattr__ = tf_policy_module(__name__, {"PPOTFPolicy": "rlmesh.agents.ppo.ppo_torch_policy.PPOTorchPolicy"})
