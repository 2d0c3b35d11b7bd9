"""A pixel env for the GPU suite's conv-net case: 84x84x4 uint8 frames, as Atari's after
DeepMind preprocessing, without ale-py (the GPU machine may lack it). The frame is bright in
the half that the rewarded action names, so the conv net has something to learn."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class HalfFrameEnv(gym.Env):
    observation_space = gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config: dict | None = None) -> None:
        self.episode_len = int((config or {}).get("episode_len", 20))
        self._target = 0
        self._t = 0

    def _frame(self) -> np.ndarray:
        frame = self.np_random.integers(0, 32, (84, 84, 4), dtype=np.uint8)
        frame[:, 42 * self._target:42 * (self._target + 1)] += 200
        return frame

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._t, self._target = 0, int(self.np_random.integers(2))
        return self._frame(), {}

    def step(self, action):
        reward = float(int(action) == self._target)
        self._t += 1
        self._target = int(self.np_random.integers(2))
        return self._frame(), reward, False, self._t >= self.episode_len, {}
