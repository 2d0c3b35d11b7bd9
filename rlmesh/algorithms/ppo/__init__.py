"""PPO (rlmesh/algorithms/ppo/ppo.py: the algorithm, its policy and loss) and, as in
RLlib's ``ray.rllib.algorithms.ppo``, its default RLModule under ``torch/``."""

from rlmesh.algorithms.ppo.ppo import PPO, PPOConfig, PPOTorchPolicy, adapt_kl_coeff

__all__ = ["PPO", "PPOConfig", "PPOTorchPolicy", "adapt_kl_coeff"]
