"""Envs that break their own contract the way user envs do (importable by path, so runner
processes build them): observations of the wrong shape, string observations, a step that
never returns."""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np


class _Base(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, env_config=None) -> None:
        self.t = 0

    def _obs(self):
        return np.zeros(4, np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), 1.0, self.t >= 20, False, {}


class WrongShapeEnv(_Base):
    """Declares Box((4,)) but returns 3 numbers after its first step (a space out of date
    with the simulator)."""

    def _obs(self):
        return np.zeros(3 if self.t else 4, np.float32)


class StringObsEnv(_Base):
    """Returns a string as its observation (a text simulator wrapped without a space)."""

    def _obs(self):
        return "state-7" if self.t else np.zeros(4, np.float32)


class HangEnv(_Base):
    """step() blocks for good at the 5th step (a simulator deadlock)."""

    def step(self, action):
        if self.t == 4:
            time.sleep(3600)
        return super().step(action)


def make_wrong_shape(env_config):
    return WrongShapeEnv(env_config)


def make_string_obs(env_config):
    return StringObsEnv(env_config)


def make_hang(env_config):
    return HangEnv(env_config)
