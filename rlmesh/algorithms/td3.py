"""TD3 (Fujimoto et al. 2018): DDPG with its three fixes switched on -- twin critics whose
smaller estimate is the target (clipped double Q), clipped Gaussian noise on the target
actor's action (target policy smoothing), and the actor and targets updated every second
critic update (delayed policy updates). The loss is DDPG's (``ddpg.py``), the defaults
RLlib's TD3's (``td3_config.py``)."""

from __future__ import annotations

from rlmesh.algorithms.ddpg import DDPG, DDPGTorchPolicy
from rlmesh.algorithms.td3_config import TD3Config

__all__ = ["TD3", "TD3Config", "DDPGTorchPolicy"]


class TD3(DDPG):
    """TD3 on the rlmesh mesh: DDPG's training step with TD3's defaults."""

    config_class = TD3Config
