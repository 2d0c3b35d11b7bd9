"""RLlib's ray.rllib.agents.ppo.ppo_torch_policy: PPO's torch policy (today
rlmesh.algorithms.ppo.PPOTorchPolicy; ``with_updates`` derives from it)."""

from rlmesh.algorithms.ppo import PPOTorchPolicy

__all__ = ["PPOTorchPolicy"]
