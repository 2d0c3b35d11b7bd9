"""TD3Config: DDPG's settings with RLlib's TD3 defaults (twin critics, target policy
smoothing, delayed actor updates, Gaussian exploration after 10k random steps)."""

from __future__ import annotations

from dataclasses import dataclass

from rlmesh.algorithms.ddpg_config import DDPGConfig

# RLlib's TD3Config.__init__ values, over DDPG's.
_TD3_DEFAULTS = {
    "twin_q": True,
    "policy_delay": 2,
    "smooth_target_policy": True,
    "target_noise": 0.2,
    "target_noise_clip": 0.5,
    "l2_reg": 0.0,
    "tau": 5e-3,
    "train_batch_size": 100,
    "num_steps_sampled_before_learning_starts": 10_000,
    "replay_buffer_config": {"type": "MultiAgentReplayBuffer", "capacity": 1_000_000},
    "exploration_config": {"type": "GaussianNoise", "random_timesteps": 10_000,
                           "stddev": 0.1, "initial_scale": 1.0, "final_scale": 1.0,
                           "scale_timesteps": 1},
}


@dataclass(kw_only=True)
class TD3Config(DDPGConfig, defaults=_TD3_DEFAULTS):
    """Twin Delayed DDPG, configured as in RLlib::

        TD3Config().environment("Pendulum-v1").training(actor_lr=1e-3)
    """

    algorithm_path = "rlmesh.algorithms.td3:TD3"
