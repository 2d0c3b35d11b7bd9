"""Memory tasks: gymnasium's CartPole and Pendulum with their velocities left out of the
observation, so a policy must infer them from the positions it saw before (RLlib's
``StatelessCartPole`` and ``StatelessPendulum``; rl-baselines3-zoo's ``CartPoleNoVel-v1`` and
``PendulumNoVel-v1`` zero the same entries instead of dropping them).

Named by import path, as any env::

    rlmesh train --run PPO --env rlmesh.env.stateless:StatelessCartPole \\
        --config '{"model": {"use_lstm": true}}'

``env_config`` goes to ``gymnasium.make`` (``max_episode_steps``, ``render_mode``, Pendulum's
``g``). The tuned examples ``stateless-cartpole-*.yaml`` and ``stateless-pendulum-*.yaml``
train them with ``use_lstm``; docs/observations_and_memory.md has the numbers.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class _WithoutVelocities(gym.ObservationWrapper):
    """``env_id`` with only the observation entries ``keep``."""

    env_id = ""
    keep: tuple[int, ...] = ()

    def __init__(self, env_config: dict | None = None) -> None:
        super().__init__(gym.make(self.env_id, **dict(env_config or {})))
        inner = self.env.observation_space
        index = list(self.keep)
        self.observation_space = gym.spaces.Box(inner.low[index], inner.high[index],
                                                dtype=np.float32)

    def observation(self, observation: Any) -> np.ndarray:
        return np.asarray(observation, np.float32)[list(self.keep)]


class StatelessCartPole(_WithoutVelocities):
    """CartPole-v1 observing the cart's position and the pole's angle, not their velocities."""

    env_id = "CartPole-v1"
    keep = (0, 2)


class StatelessPendulum(_WithoutVelocities):
    """Pendulum-v1 observing cos and sin of the angle, not the angular velocity."""

    env_id = "Pendulum-v1"
    keep = (0, 1)
