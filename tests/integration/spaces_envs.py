"""Small envs of every space kind for the spaces tests (importable, so runner processes find
them): a MultiDiscrete-action and a Tuple-action target task, an env with an action mask,
a Dict-observation env with an image, and MiniGrid with its mission dropped."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

EXTRA_HINT = "pip install 'rlmesh[envs]'"


def make_minigrid(env_config: dict | None = None) -> gym.Env:
    """A MiniGrid env (``env_config["id"]``, default MiniGrid-Empty-5x5-v0) with Dict
    observations of image (7x7x3 uint8) and direction; the mission text is dropped."""
    try:
        import minigrid  # noqa: F401 (registers the MiniGrid ids)
    except ImportError:
        raise ImportError(f"MiniGrid envs need the minigrid package: {EXTRA_HINT}") from None
    env = gym.make((env_config or {}).get("id", "MiniGrid-Empty-5x5-v0"))
    return gym.wrappers.FilterObservation(env, ["image", "direction"])


class MultiDiscreteTargetEnv(gym.Env):
    """Episodes of 8 steps; the observation is a cue in {0, 1} (one-hot); the action is
    MultiDiscrete([3, 4]) and each entry that equals its target for the cue earns 0.5
    (best return 8, a uniform policy's about 2.3)."""

    observation_space = gym.spaces.Box(0, 1, (2,), np.float32)
    action_space = gym.spaces.MultiDiscrete([3, 4])
    TARGETS = np.array([[2, 1], [0, 3]])

    def __init__(self, env_config: Any = None) -> None:
        self.rng = np.random.default_rng()

    def _obs(self) -> np.ndarray:
        return np.eye(2, dtype=np.float32)[self.cue]

    def reset(self, *, seed: int | None = None, options: Any = None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t, self.cue = 0, int(self.rng.integers(2))
        return self._obs(), {}

    def step(self, action):
        assert self.action_space.contains(np.asarray(action, np.int64)), action
        reward = 0.5 * float(np.sum(np.asarray(action) == self.TARGETS[self.cue]))
        self.t += 1
        self.cue = int(self.rng.integers(2))
        return self._obs(), reward, False, self.t >= 8, {}


class TupleTargetEnv(gym.Env):
    """Episodes of 8 steps, a constant observation; the action is Tuple(Discrete(3),
    Box(-1, 1, (2,))): reward 1 when the discrete part is 2, minus the distance of the
    Box part from [0.5, -0.5] (best return 8, a random policy's about -3)."""

    observation_space = gym.spaces.Box(0, 1, (1,), np.float32)
    action_space = gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.Box(-1, 1, (2,), np.float32)))
    TARGET = np.array([0.5, -0.5])

    def __init__(self, env_config: Any = None) -> None:
        pass

    def reset(self, *, seed: int | None = None, options: Any = None):
        self.t = 0
        return np.ones(1, np.float32), {}

    def step(self, action):
        choice, point = action
        assert self.action_space.contains((int(choice), np.asarray(point, np.float32))), action
        reward = float(choice == 2) - float(np.linalg.norm(np.asarray(point) - self.TARGET))
        self.t += 1
        return np.ones(1, np.float32), reward, False, self.t >= 8, {}


class MaskedEnv(gym.Env):
    """Dict observations {"obs": a random vector, "action_mask": which actions are valid
    this step (random, at least one)}; ``env_config["multi"]``: MultiDiscrete([3, 4])
    actions with a mask of 7 (one block per entry), else Discrete(5). Reward 1 for the
    action the mask rules out most often (action 0 is masked half the time): an agent
    that ignored the mask would learn to take it."""

    def __init__(self, env_config: Any = None) -> None:
        self.multi = bool((env_config or {}).get("multi", False))
        self.nvec = [3, 4] if self.multi else [5]
        n = sum(self.nvec)
        self.action_space = (gym.spaces.MultiDiscrete(self.nvec) if self.multi
                             else gym.spaces.Discrete(5))
        self.observation_space = gym.spaces.Dict({
            "obs": gym.spaces.Box(-1, 1, (3,), np.float32),
            "action_mask": gym.spaces.MultiBinary(n)})
        self.rng = np.random.default_rng()
        self.violations = 0

    def _obs(self) -> dict:
        blocks = []
        for n in self.nvec:
            block = (self.rng.random(n) < 0.5).astype(np.int8)
            if not block[1:].any():
                block[1 + int(self.rng.integers(n - 1))] = 1
            blocks.append(block)
        self.mask = np.concatenate(blocks)
        return {"obs": self.rng.uniform(-1, 1, 3).astype(np.float32), "action_mask": self.mask}

    def reset(self, *, seed: int | None = None, options: Any = None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        picks = np.atleast_1d(np.asarray(action))
        offsets = np.cumsum([0, *self.nvec[:-1]])
        if not all(self.mask[o + a] for o, a in zip(offsets, picks)):
            raise AssertionError(f"masked action {action} taken (mask {self.mask})")
        reward = float(np.sum(picks == 0))
        self.t += 1
        return self._obs(), reward, False, self.t >= 20, {}
