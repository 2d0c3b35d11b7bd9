"""Envs that fail the way user envs do, for the recovery tests: one whose step() hangs, one
whose step() always raises, one that raises now and then (importable by path, so runner
processes build them)."""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np


class _Base(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, env_config=None) -> None:
        self.worker_index = getattr(env_config, "worker_index", 0)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def _step(self):
        self.t += 1
        return np.zeros(2, np.float32), 1.0, self.t >= 20, False, {}


class HangEnv(_Base):
    """In env runner 1, step() blocks for good at the 10th step (a simulator deadlock)."""

    def step(self, action):
        if self.worker_index == 1 and self.t == 9:
            time.sleep(3600)
        return self._step()


class RaiseEnv(_Base):
    """step() always raises (a broken simulator)."""

    def step(self, action):
        raise ConnectionError("simulator at 10.0.0.7 refused the step")


class FlakyEnv(_Base):
    """step() raises on every 15th call (a simulator that drops now and then)."""

    calls = 0  # over the env's instances in this process: recreating it does not reset it

    def step(self, action):
        FlakyEnv.calls += 1
        if FlakyEnv.calls % 15 == 0:
            raise ConnectionError("simulator dropped the connection")
        return self._step()


def make_flaky(env_config):
    return FlakyEnv(env_config)


def make_hang(env_config):
    return HangEnv(env_config)


def make_raise(env_config):
    return RaiseEnv(env_config)
