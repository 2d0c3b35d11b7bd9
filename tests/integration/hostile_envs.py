"""Envs that hand training bad numbers (importable, so runner processes find them): CartPole
that returns a NaN observation, an infinite reward or a huge but finite reward at a chosen
step of some episodes."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class PoisonedCartPole(gym.Wrapper):
    """CartPole-v1 whose step ``at`` of every ``every``-th episode returns ``obs`` (a float
    put in every observation entry) and/or ``reward`` in place of the real ones."""

    def __init__(self, env_config: dict | None = None) -> None:
        super().__init__(gym.make("CartPole-v1"))
        config = dict(env_config or {})
        self.at, self.every = int(config.get("at", 5)), int(config.get("every", 1))
        self.bad_obs, self.bad_reward = config.get("obs"), config.get("reward")
        self.episode, self.t = -1, 0

    def reset(self, **kwargs):
        self.episode, self.t = self.episode + 1, 0
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.t += 1
        if self.t == self.at and self.episode % self.every == 0:
            if self.bad_obs is not None:
                obs = np.full_like(obs, float(self.bad_obs))
            if self.bad_reward is not None:
                reward = float(self.bad_reward)
        return obs, reward, terminated, truncated, info
