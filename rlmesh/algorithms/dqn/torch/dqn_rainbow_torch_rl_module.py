"""RLlib's older ``ray.rllib.algorithms.dqn.torch.dqn_rainbow_torch_rl_module`` (before
2.40): the same default module under its old name."""

from rlmesh.models.default_modules import DefaultDQNTorchRLModule

#: RLlib's name before 2.40.
DQNRainbowTorchRLModule = DefaultDQNTorchRLModule

__all__ = ["DQNRainbowTorchRLModule", "DefaultDQNTorchRLModule"]
