"""The sampling logic of an env runner over C++ vector envs (rlmesh/env/vector.py), as plain
code tested without sockets: fragments in EnvSampler's layout, and double buffering, Sample
Factory's split: the runner's envs in two groups, one stepping in the emulator's threads
while the runner computes (or awaits, with central inference) the other's actions."""

from __future__ import annotations

import inspect
import itertools
from typing import Any, Awaitable, Callable

import numpy as np

from rlmesh.callbacks import Callbacks, Episode
from rlmesh.policy.policy import Policy
from rlmesh.rl.columns import Columns, env_columns, optional_columns
from rlmesh.rl.filters import NoFilter
from rlmesh.roles.env_slots import RESEED_STRIDE
from rlmesh.roles.fragment_buffer import FragmentBuffer
from rlmesh.roles.runner_policy import call_actions

#: ``act(obs, explore) -> (actions, extras, policy version or None)``, maybe a coroutine.
Act = Callable[[np.ndarray, Any], Any]


class VectorSamplerError(ValueError):
    """A policy or callback the vector sampler cannot serve, named in one line."""


def split_sizes(num_envs: int, splits: int) -> list[int]:
    """``num_envs`` as ``splits`` groups as even as can be (the first ones larger)."""
    if not 1 <= splits <= num_envs:
        raise VectorSamplerError(f"double buffering splits {num_envs} envs in {splits} groups; "
                                 "it needs at least 2 envs per runner (num_envs_per_env_runner)")
    return [num_envs // splits + (i < num_envs % splits) for i in range(splits)]


class VectorEnvSampler:
    """Steps ``num_envs`` envs as ``splits`` vector envs made by ``make_vector(n)`` and
    assembles fragments as ``EnvSampler.sample`` does (``[T, B, ...]`` columns, ``next_obs``,
    ``trunc_index``/``trunc_obs``, ``episodes``). ``act`` (central inference) replaces the
    local policy's ``compute_actions``; then ``sample`` is awaited either way."""

    def __init__(self, make_vector: Callable[[int], Any], num_envs: int,
                 policy: Policy | None = None, *, splits: int = 1, seed: int | None = None,
                 callbacks: Callbacks | None = None, env_runner: Any = None,
                 clip_rewards: bool | float | None = None, act: Act | None = None) -> None:
        self.sizes = split_sizes(num_envs, splits)
        self.groups = [make_vector(n) for n in self.sizes]
        self.offsets = list(itertools.accumulate([0, *self.sizes[:-1]]))
        self.num_envs = num_envs
        self.observation_space = self.groups[0].single_observation_space
        self.action_space = self.groups[0].single_action_space
        self.policy = policy
        self.act = act
        self.seed = seed
        self.callbacks = callbacks
        if callbacks is not None and type(callbacks).on_episode_step is not Callbacks.on_episode_step:
            raise VectorSamplerError(
                f"{type(callbacks).__name__}.on_episode_step: per-step callbacks are not called "
                "with a vector env (they would run between the emulator's threads); use "
                "on_episode_end, or env_config atari vector False")
        self.env_runner = env_runner if env_runner is not None else self
        self.clip_rewards = clip_rewards
        self.obs_filter = NoFilter()  # frames are not filtered (observation_filter refused)
        self.counters = {"num_env_steps_sampled": 0, "num_episodes": 0, "env_errors": 0,
                         "num_nonfinite_steps_skipped": 0}
        self.first_env_error: str | None = None
        self.stepping = -1
        self._episode_ids = itertools.count()
        self._started = False
        # Each group's newest frames as the vector env returned them (no copy: the one copy
        # of a frame is into the fragment, in _act).
        self._obs: list[np.ndarray] = [np.zeros(0)] * len(self.groups)
        self._returns = np.zeros(num_envs)  # raw rewards of the running episodes
        self._lengths = np.zeros(num_envs, np.int64)
        self._ids = np.zeros(num_envs, np.int64)
        self._specs: dict[str, Any] = {}
        self._bound: Policy | None = None
        self.versions_used: list[int] = []  # central inference: the versions acted with
        self._pending = [False] * len(self.groups)  # per group: a step sent, not received
        self._cut: int | None = None

    @property
    def envs(self) -> list[Any]:
        return self.groups

    def _bind(self, policy: Policy) -> None:
        wanted = dict(policy.view_requirements)
        optional = optional_columns(self.action_space)
        if policy.get_initial_state() or set(wanted) & set(optional):
            raise VectorSamplerError(
                f"{type(policy).__name__} asks for recurrent state or previous actions/rewards, "
                "which the Atari vector env sampler does not keep yet; set env_config atari "
                "vector False (or use framestack instead of use_lstm)")
        self._specs = {**env_columns(self.observation_space, self.action_space),
                       **{k: v for k, v in wanted.items() if k not in optional}}
        self._bound = policy

    def restart_episodes(self) -> None:
        self._started = False

    def _reset_all(self) -> None:
        for g, (env, off) in enumerate(zip(self.groups, self.offsets)):
            seed = None if self.seed is None else self.seed + off
            self._obs[g], _ = env.reset(seed=seed)
        self.seed = None if self.seed is None else self.seed + RESEED_STRIDE  # a restart: new games
        self._returns[:] = 0
        self._lengths[:] = 0
        self._ids[:] = [next(self._episode_ids) for _ in range(self.num_envs)]
        if self.callbacks is not None:
            for b in range(self.num_envs):
                self.callbacks.on_episode_start(episode=Episode(b, int(self._ids[b])),
                                                env_runner=self.env_runner, env_index=b)
        self._started = True

    async def sample(self, num_steps: int, complete_episodes: bool = False,
                     explore: bool | None = None) -> dict[str, Any]:
        """One fragment of ``num_steps`` rows of every env; with ``complete_episodes``, rows
        go on until each env's episode ended (later rows of an env already done are
        padding), and the next fragment starts every env on a fresh episode."""
        if self.act is None and self.policy is None:
            raise RuntimeError("VectorEnvSampler has no policy")
        policy = self.policy
        if policy is not None and self._bound is not policy:
            self._bind(policy)
        elif not self._specs:
            self._specs = env_columns(self.observation_space, self.action_space)
        if not self._started:
            self._reset_all()
        buf = FragmentBuffer(num_steps, self.num_envs, self._specs)
        self._episodes: list[dict[str, Any]] = []
        self.versions_used = []
        live = np.ones(self.num_envs, bool)  # envs whose rows still count
        self._cut = num_steps - 1 if complete_episodes else None
        pending = self._pending = [False] * len(self.groups)  # sent, not yet received
        while True:
            t = buf.add_row()
            for g in range(len(self.groups)):
                if pending[g]:
                    pending[g] = False
                    self._recv(g, t - 1, buf, live)
                await self._act(g, t, buf, explore)
                pending[g] = True
            if t + 1 >= num_steps and not (complete_episodes and live.any()):
                break
        finals: dict[int, np.ndarray] = {}  # envs whose episode ended on the last row
        for g in range(len(self.groups)):
            pending[g] = False
            self._recv(g, t, buf, live, finals)
        next_obs = np.concatenate(self._obs)
        for b, last in finals.items():
            next_obs[b] = last
        if complete_episodes:
            self._started = False  # envs stepped past their episode: fresh ones next time
        fragment = buf.build(next_obs)
        fragment["num_env_errors"] = 0
        fragment["env_steps"] = int(fragment["mask"].sum())
        fragment["num_nonfinite_steps_skipped"] = 0
        fragment["episodes"] = self._episodes
        self.counters["num_env_steps_sampled"] += fragment["env_steps"]
        return fragment

    async def _act(self, g: int, t: int, buf: FragmentBuffer, explore: bool | None) -> None:
        """Row ``t`` of group ``g``: its observations, actions and extras; the actions sent."""
        sl = slice(self.offsets[g], self.offsets[g] + self.sizes[g])
        cols = buf.cols
        cols[Columns.OBS][t, sl] = self._obs[g]  # the one copy of the frames
        obs = cols[Columns.OBS][t, sl]
        if self.act is not None:
            out = self.act(obs, explore)
            actions, extras, version = await out if inspect.isawaitable(out) else out
            if version is not None:
                self.versions_used.append(version)
        else:
            actions, _, extras = call_actions(self.policy, obs, explore=explore)
        cols[Columns.ACTIONS][t, sl] = actions
        for key, values in extras.items():
            if key in cols:
                cols[key][t, sl] = values
            else:
                buf.put(key, t, sl, values)
        self.groups[g].send(np.asarray(actions, np.int64))

    def _recv(self, g: int, t: int, buf: FragmentBuffer, live: np.ndarray,
              finals: dict[int, np.ndarray] | None = None) -> None:
        """Group ``g``'s step results into row ``t``; ended episodes reported, their last
        frame kept for bootstrapping (``trunc_obs``, or ``next_obs`` on the last row)."""
        off, n = self.offsets[g], self.sizes[g]
        sl = slice(off, off + n)
        obs, reward, terminated, truncated, info = self.groups[g].recv()
        ids = info.get("env_id")
        if ids is not None and not np.array_equal(ids, np.arange(n)):
            order = np.argsort(ids)
            obs, reward, terminated, truncated = (obs[order], reward[order], terminated[order],
                                                  truncated[order])
            info = {k: (np.asarray(v)[order] if np.ndim(v) and len(v) == n else v)
                    for k, v in info.items()}
        cols = buf.cols
        reward = np.asarray(reward, np.float32)
        cols[Columns.REWARDS][t, sl] = self._clipped(reward)
        cols[Columns.TERMINATEDS][t, sl] = terminated
        cols[Columns.TRUNCATEDS][t, sl] = truncated
        counted = live[sl]
        resetting = info.get("reset_step")  # EnvPool: this step only reset the env
        if resetting is not None and resetting.any():
            counted = counted & ~resetting
            reward = np.where(resetting, 0.0, reward).astype(np.float32)
        cols[Columns.MASK][t, sl] = counted
        self._returns[sl] += reward
        self._lengths[sl] += counted if resetting is not None else 1
        self._obs[g] = obs
        done = np.flatnonzero(np.logical_or(terminated, truncated))
        if not len(done):
            return
        final = info.get("final_obs")
        for k in done:
            b = off + int(k)
            last = final[k] if final is not None else obs[k]
            if finals is not None:
                finals[b] = last
            elif truncated[k] and not terminated[k]:
                buf.trunc.append((t, b, np.array(last)))
            if live[b]:
                self._end_episode(b)
                if self._cut is not None and t >= self._cut:
                    live[b] = False  # complete_episodes: done; its later rows are padding
            else:  # complete_episodes: the episode begun past the cut is not reported
                self._start_episode(b)

    def _clipped(self, reward: np.ndarray) -> np.ndarray:
        if self.clip_rewards is True:
            return np.sign(reward)
        if self.clip_rewards:
            return np.clip(reward, -self.clip_rewards, self.clip_rewards)
        return reward

    def _end_episode(self, b: int) -> None:
        summary = {"return": float(self._returns[b]), "length": int(self._lengths[b]),
                   "custom_metrics": {}}
        if self.callbacks is not None:
            episode = Episode(b, int(self._ids[b]))
            episode.total_reward, episode.length = summary["return"], summary["length"]
            self.callbacks.on_episode_end(episode=episode, env_runner=self.env_runner,
                                          env_index=b)
            summary["custom_metrics"] = episode.summary()["custom_metrics"]
        self._episodes.append(summary)
        self.counters["num_episodes"] += 1
        self._start_episode(b)

    def _start_episode(self, b: int) -> None:
        self._returns[b] = 0
        self._lengths[b] = 0
        self._ids[b] = next(self._episode_ids)
        if self.callbacks is not None:
            self.callbacks.on_episode_start(episode=Episode(b, int(self._ids[b])),
                                            env_runner=self.env_runner, env_index=b)

    def close(self) -> None:
        """Close the envs; a step sent and not received (a fragment cancelled at stop) is
        received first: ale-py's close waits for its threads, which wait for that recv."""
        for g, env in enumerate(self.groups):
            if self._pending[g]:
                env.recv()
            env.close()
