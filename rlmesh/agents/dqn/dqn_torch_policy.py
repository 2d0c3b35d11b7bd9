"""RLlib's ray.rllib.agents.dqn.dqn_torch_policy: DQN's torch policy (today
rlmesh.algorithms.dqn.DQNTorchPolicy)."""

from rlmesh.algorithms.dqn import DQNTorchPolicy

__all__ = ["DQNTorchPolicy"]
