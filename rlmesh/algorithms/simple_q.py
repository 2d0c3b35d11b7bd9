"""SimpleQ (RLlib's): DQN's training step and loss (``dqn.py``) with SimpleQ's defaults
(``simple_q_config.py``); a class of its own so that checkpoints name it."""

from __future__ import annotations

from rlmesh.algorithms.dqn import DQN, DQNTorchPolicy
from rlmesh.algorithms.simple_q_config import SimpleQConfig

__all__ = ["SimpleQ", "SimpleQConfig", "DQNTorchPolicy"]


class SimpleQ(DQN):
    """Plain DQN on the rlmesh mesh."""

    config_class = SimpleQConfig
