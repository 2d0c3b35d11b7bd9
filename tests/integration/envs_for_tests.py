"""Small deterministic envs for the env-runner tests (importable, so runner processes find
them): observations encode the step count, failures happen at a chosen step. Also a param
server that holds its answers and a sink for streamed fragments."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import gymnasium as gym
import numpy as np

from rlmesh.callbacks import Callbacks
from rlmesh.roles.paramserver import ParamServer
from rlmesh.runtime import Actor

_instances: Counter = Counter()  # envs made so far in this process, per vector_index


class CountEnv(gym.Env):
    """obs = [steps taken in this episode, a number drawn from the env's RNG at reset];
    reward 1 per step. ``env_config``: ``terminate_at`` (terminated on that step),
    ``step_sleep_s`` (each step sleeps this long: a slow env), ``fail_at`` (step() raises on that step of episode ``fail_episode``, default the first,
    in the first env made for each vector index in this process), ``fail_reset`` (the
    first env made for each vector index raises in its first reset)."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, env_config: dict | None = None) -> None:
        config = dict(env_config or {})
        vector_index = getattr(env_config, "vector_index", 0)
        first = _instances[vector_index] == 0
        _instances[vector_index] += 1
        self.terminate_at = config.get("terminate_at")
        self.fail_at = config.get("fail_at") if first else None
        self.fail_episode = config.get("fail_episode", 0)
        self.fail_reset = bool(config.get("fail_reset")) and first
        self.step_sleep_s = float(config.get("step_sleep_s", 0.0))
        self.phase = 0
        self.t = 0
        self.start = 0.0
        self.total_steps = 0  # over all episodes: how often the runner stepped this env
        self.episode = -1  # resets so far, minus one

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if self.fail_reset:
            self.fail_reset = False
            raise RuntimeError("CountEnv: failing in reset, as configured")
        self.episode += 1
        self.t, self.start = 0, float(self.np_random.integers(0, 1000))
        return self._obs(), {"phase": self.phase}

    def step(self, action):
        if self.episode == self.fail_episode and self.t + 1 == self.fail_at:
            raise RuntimeError(f"CountEnv: failing at step {self.fail_at}, as configured")
        if self.step_sleep_s:
            time.sleep(self.step_sleep_s)
        self.t += 1
        self.total_steps += 1
        terminated = self.terminate_at is not None and self.t >= self.terminate_at
        return self._obs(), 1.0, terminated, False, {"t": self.t}

    def _obs(self) -> np.ndarray:
        return np.array([self.t, self.start], dtype=np.float32)

    def set_phase(self, phase: int) -> int:
        self.phase = phase
        return phase


def make_count_env(env_config: dict) -> gym.Env:
    """CountEnv, cut by a TimeLimit when ``env_config["max_episode_steps"]`` is set; with
    ``limit_step`` the env at vector index i gets ``limit_step * i`` steps more."""
    env = CountEnv(env_config)
    limit = env_config.get("max_episode_steps")
    if limit:
        limit += env_config.get("limit_step", 0) * getattr(env_config, "vector_index", 0)
    return gym.wrappers.TimeLimit(env, limit) if limit else env


def phase_of(env: gym.Env, offset: int = 0) -> int:
    """For foreach_env: the (unwrapped) env's phase, plus ``offset``."""
    return env.phase + offset


class EpisodeCallbacks(Callbacks):
    """Counts steps in user_data and reports them, and the env index, as custom metrics."""

    def on_episode_start(self, *, episode, env_runner, env_index, **kwargs):
        episode.user_data["steps"] = 0

    def on_episode_step(self, *, episode, env_runner, env_index, **kwargs):
        episode.user_data["steps"] += 1

    def on_episode_end(self, *, episode, env_runner, env_index, **kwargs):
        episode.custom_metrics["steps_seen"] = episode.user_data["steps"]
        episode.custom_metrics["env_index"] = env_index


def sleep_in_env(env: gym.Env, seconds: float) -> None:
    """For ``foreach_env``: hold the runner's loop, as a long env step would."""
    import time

    time.sleep(seconds)


def modules_loaded(env: gym.Env, name: str) -> bool:
    """For ``foreach_env``: whether the runner process has imported module ``name``."""
    import sys

    return name in sys.modules


class RecordingParamServer(ParamServer):
    """A param server that keeps the version of every set of weights published to it."""

    protocol = ParamServer.protocol.extend(calls=("versions",))

    def __init__(self) -> None:
        super().__init__()
        self.published: list[int] = []

    async def set_weights(self, version: int, weights: dict[str, Any]) -> None:
        await super().set_weights(version, weights)
        self.published.append(version)

    def versions(self) -> list[int]:
        return self.published


class FragmentSink(Actor):
    """Keeps the policy version of each fragment streamed to it."""

    def __init__(self) -> None:
        self.versions: list[int] = []

    def add_fragment(self, fragment: dict[str, Any]) -> None:
        self.versions.append(int(fragment["policy_version"]))

    def received(self) -> list[int]:
        return self.versions


class HeldFragmentSink(FragmentSink):
    """A sink that keeps each fragment's credit until the test calls ``release()``: a
    learner whose queue is full. ``add_fragment`` records the fragment and then waits."""

    def __init__(self) -> None:
        super().__init__()
        self._released = asyncio.Event()

    async def add_fragment(self, fragment: dict[str, Any]) -> None:
        super().add_fragment(fragment)
        await self._released.wait()

    def release(self) -> None:
        self._released.set()


class RepeatFirstEnv(gym.Env):
    """A memory task: the first observation shows one of ``num_symbols`` symbols (one-hot),
    every later one is blank; the last of ``length`` steps pays 1 if the action names the
    symbol shown at the start, else 0. A policy without memory is right 1/num_symbols of
    the time; one that remembers, always. ``env_config``: ``num_symbols`` (4), ``length`` (4)."""

    action_space: gym.spaces.Discrete

    def __init__(self, env_config: dict | None = None) -> None:
        config = dict(env_config or {})
        self.num_symbols = int(config.get("num_symbols", 4))
        self.length = int(config.get("length", 4))
        # The extra entry flags the first step, so that even blank steps differ from it.
        self.observation_space = gym.spaces.Box(0.0, 1.0, (self.num_symbols + 1,), np.float32)
        self.action_space = gym.spaces.Discrete(self.num_symbols)
        self.symbol, self.t = 0, 0

    def _obs(self) -> np.ndarray:
        obs = np.zeros(self.num_symbols + 1, np.float32)
        if self.t == 0:
            obs[self.symbol], obs[-1] = 1.0, 1.0
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.symbol, self.t = int(self.np_random.integers(self.num_symbols)), 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        done = self.t >= self.length
        reward = float(done and int(action) == self.symbol)
        return self._obs(), reward, done, False, {}


class FarPointEnv(gym.Env):
    """Observations far from the origin: ``center`` (default [1000, -500]) plus a standard
    normal draw each step. The best action is ``tanh(n0 - n1)`` of that draw ``n``; the
    reward is minus the squared miss, over ``length`` steps (25). A network reading the
    raw numbers sees its tanh units saturated; one reading them normalised learns the task.
    ``expert_action(obs)`` is the best action (how a dataset for it is made)."""

    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)

    def __init__(self, env_config: dict | None = None) -> None:
        config = dict(env_config or {})
        self.center = np.asarray(config.get("center", [1000.0, -500.0]), np.float32)
        self.length = int(config.get("length", 25))
        self.t, self.obs = 0, self.center

    def expert_action(self, obs: np.ndarray) -> np.ndarray:
        n = np.asarray(obs, np.float32) - self.center
        return np.tanh(n[..., :1] - n[..., 1:2]).astype(np.float32)

    def _draw(self) -> np.ndarray:
        self.obs = (self.center + self.np_random.standard_normal(2)).astype(np.float32)
        return self.obs

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        return self._draw(), {}

    def step(self, action):
        miss = float(np.clip(action, -1, 1)[0] - self.expert_action(self.obs)[0])
        self.t += 1
        return self._draw(), -miss * miss, False, self.t >= self.length, {}
