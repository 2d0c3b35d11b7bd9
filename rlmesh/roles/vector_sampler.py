"""The sampling logic of an env runner over vector envs (ale-py's and EnvPool's C++ Atari,
rlmesh/env/vector.py; any gymnasium VectorEnv, rlmesh/env/gym_vector.py), as plain code
tested without sockets: fragments in EnvSampler's layout, written a whole batch at a time
(no Python runs per env unless a callback asks for each episode; the episodes' bookkeeping
is vector_episodes.py), and double buffering, Sample Factory's split: the runner's envs in
two groups, one stepping in the emulator's threads while the runner computes (or awaits,
with central inference) the other's actions."""

from __future__ import annotations

import inspect
import itertools
from typing import Any, Callable

import numpy as np

import gymnasium as gym

from rlmesh.callbacks import Callbacks, Episode, runner_metrics_logger
from rlmesh.env.registry import actions_for_env
from rlmesh.policy.policy import Policy
from rlmesh.rl.columns import ColumnSpec, Columns, env_columns, optional_columns
from rlmesh.rl.filters import NoFilter
from rlmesh.rl.finite import NonFiniteError, describe
from rlmesh.roles.env_slots import RESEED_STRIDE
from rlmesh.roles.fragment_buffer import FragmentBuffer
from rlmesh.roles.held_noise import HeldNoise
from rlmesh.roles.runner_policy import call_actions
from rlmesh.roles.vector_episodes import VectorEpisodes

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


class VectorEnvSampler(VectorEpisodes):
    """Steps ``num_envs`` envs as ``splits`` vector envs made by ``make_vector(n)`` and
    assembles fragments as ``EnvSampler.sample`` does (``[T, B, ...]`` columns, ``next_obs``,
    ``trunc_index``/``trunc_obs``, ``episodes``). ``act`` (central inference) replaces the
    local policy's ``compute_actions``; then ``sample`` is awaited either way."""

    def __init__(self, make_vector: Callable[[int], Any], num_envs: int,
                 policy: Policy | None = None, *, splits: int = 1, seed: int | None = None,
                 callbacks: Callbacks | None = None, env_runner: Any = None,
                 clip_rewards: bool | float | None = None, act: Act | None = None,
                 normalize_actions: bool = True, clip_actions: bool = True,
                 obs_filter: Any = None, reward_normalizer: Any = None,
                 noise_hold: int = 1) -> None:
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
        # Callbacks see one Episode per env, kept from its start to its end; per-step work
        # (record_step, on_episode_step) runs only where the callbacks define a step hook.
        self._episodes_of: list[Episode | None] = [None] * num_envs
        self.keep_history = callbacks is not None  # their get_observations(...) read it
        self._per_step = (callbacks is not None and
                          type(callbacks).on_episode_step is not Callbacks.on_episode_step)
        self.env_runner = env_runner if env_runner is not None else self
        self.metrics_logger = runner_metrics_logger(env_runner)  # the hooks' metrics_logger
        self._hook_args: list[dict[str, Any]] = [{} for _ in range(num_envs)]
        self.clip_rewards = clip_rewards
        # observation_filter (rl/filters.py) over the whole batch; normalize_rewards by the
        # batch's returns (ReturnNormalizer.batch): both numpy over the batch.
        self.obs_filter = obs_filter if obs_filter is not None else NoFilter()
        self.reward_normalizer = reward_normalizer
        self.normalize_actions, self.clip_actions = normalize_actions, clip_actions
        space = self.action_space
        self._int_actions = isinstance(space, gym.spaces.Discrete)
        self._box_actions = isinstance(space, gym.spaces.Box)
        self._float_obs = np.dtype(getattr(self.observation_space, "dtype", None)
                                   or np.uint8).kind == "f"
        self.counters = {"num_env_steps_sampled": 0, "num_episodes": 0, "env_errors": 0,
                         "num_nonfinite_steps_skipped": 0}
        self.first_env_error: str | None = None
        # Without callbacks, the episodes a fragment lists: its last ``episodes_listed``
        # (what results smooth over, metrics_num_episodes_for_smoothing), the others counted
        # in ``num_episodes_unlisted``. A thousand envs end thousands of short episodes a
        # second; a dict each, encoded and decoded, cost more than stepping them. None: all.
        self.episodes_listed: int | None = None
        self._ended_returns: list[np.ndarray] = []
        self._ended_lengths: list[np.ndarray] = []
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
        self._reset_rows = 0  # this fragment's next-step reset rows (masked out)
        self._per_env_inputs = self._with_ids = False  # set by _bind: what the policy asks for
        self._bound: Policy | None = None
        self.versions_used: list[int] = []  # central inference: the versions acted with
        self._pending = [False] * len(self.groups)  # per group: a step sent, not received
        self._cut: int | None = None
        # noise_hold_steps: each env's draw for a Gaussian policy, held (roles/held_noise.py).
        self.held_noise = HeldNoise.for_space(space, num_envs, noise_hold, seed)
        if self.held_noise is not None and act is not None:
            raise VectorSamplerError(
                f"noise_hold_steps={noise_hold}: the inference actor draws the actions and "
                "holds no noise per env; set inference_mode 'runner' or noise_hold_steps=1")

    @property
    def envs(self) -> list[Any]:
        return self.groups

    def _bind(self, policy: Policy) -> None:
        """The columns and per-env inputs ``policy`` needs, as EnvSampler keeps them, here
        as arrays over the batch: recurrent state, previous actions and rewards, the
        episode's id and the step's index."""
        n = self.num_envs
        wanted = dict(policy.view_requirements)
        optional = optional_columns(self.action_space)
        self._specs = {**env_columns(self.observation_space, self.action_space),
                       **{k: v for k, v in wanted.items() if k not in optional}}
        self._initial = [np.asarray(s) for s in policy.get_initial_state()]
        self._states = [np.repeat(s[None], n, 0) for s in self._initial]
        for i, s in enumerate(self._initial):
            spec = ColumnSpec(tuple(s.shape), s.dtype)
            self._specs[Columns.state_in(i)] = self._specs[Columns.state_out(i)] = spec
        prev = {k: optional[k] for k in (Columns.PREV_ACTIONS, Columns.PREV_REWARDS)
                if k in wanted}
        self._prev_values = {k: np.zeros((n, *spec.shape), spec.dtype) for k, spec in prev.items()}
        self._steps = np.zeros(n, np.int64) if Columns.T in wanted else None
        self._with_ids = Columns.EPS_ID in wanted
        self._specs.update(prev)
        self._specs.update({k: optional[k] for k in (Columns.EPS_ID, Columns.T) if k in wanted})
        self._per_env_inputs = bool(self._states or prev or self._steps is not None
                                    or self._with_ids)
        if self.held_noise is not None:
            self.held_noise.check(policy)
        if self._per_env_inputs and self.act is not None:
            raise VectorSamplerError(
                f"{type(policy).__name__} asks for recurrent state, previous actions/rewards "
                "or episode counters, which central inference does not pass: set "
                "inference_mode 'runner'")
        self._bound = policy

    def _reset_inputs(self, envs: Any) -> None:
        """Envs ``envs`` start an episode: their per-env inputs as at a reset."""
        if self.held_noise is not None:
            self.held_noise.restart(envs)
        if not self._per_env_inputs:
            return
        for state, initial in zip(self._states, self._initial):
            state[envs] = initial
        for values in self._prev_values.values():
            values[envs] = 0
        if self._steps is not None:
            self._steps[envs] = 0

    def restart_episodes(self) -> None:
        self._started = False

    def _reset_all(self) -> None:
        for g, (env, off) in enumerate(zip(self.groups, self.offsets)):
            seed = None if self.seed is None else self.seed + off
            obs, _ = env.reset(seed=seed)
            self._obs[g] = obs if type(self.obs_filter) is NoFilter else self.obs_filter(obs)
        self.seed = None if self.seed is None else self.seed + RESEED_STRIDE  # a restart: new games
        self._returns[:] = 0
        self._lengths[:] = 0
        self._ids[:] = [next(self._episode_ids) for _ in range(self.num_envs)]
        self._reset_inputs(slice(None))
        if self.callbacks is not None:
            first = np.concatenate(self._obs)
            for b in range(self.num_envs):
                self._new_episode(b, first[b])
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
        finals: list[tuple[np.ndarray, np.ndarray]] = []  # (envs, last obs): ended on the last row
        for g in range(len(self.groups)):
            pending[g] = False
            self._recv(g, t, buf, live, finals)
        next_obs = np.concatenate(self._obs)
        for envs, last in finals:
            next_obs[envs] = last
        if complete_episodes:
            self._started = False  # envs stepped past their episode: fresh ones next time
        fragment = buf.build(next_obs)
        fragment["num_env_errors"] = 0
        fragment["env_steps"] = int(fragment["mask"].sum())
        if self._reset_rows:  # next-step resets: rows of the fragment, not env steps
            fragment["num_reset_rows"], self._reset_rows = self._reset_rows, 0
        fragment["num_nonfinite_steps_skipped"] = 0
        fragment["episodes"] = self._episodes
        if self._ended_returns:
            self._list_episodes(fragment)
        self.counters["num_env_steps_sampled"] += fragment["env_steps"]
        return fragment

    async def _act(self, g: int, t: int, buf: FragmentBuffer, explore: bool | None) -> None:
        """Row ``t`` of group ``g``: its observations, actions and extras; the actions sent."""
        sl = slice(self.offsets[g], self.offsets[g] + self.sizes[g])
        cols = buf.cols
        cols[Columns.OBS][t, sl] = self._obs[g]  # the one copy of the frames
        obs = cols[Columns.OBS][t, sl]
        noise = self.held_noise.draws(sl) if self.held_noise is not None else None
        if self.act is not None:
            out = self.act(obs, explore)
            actions, extras, version = await out if inspect.isawaitable(out) else out
            if version is not None:
                self.versions_used.append(version)
        elif self._per_env_inputs:
            actions, extras = self._act_with_inputs(t, sl, obs, buf, explore, noise)
        else:
            actions, _, extras = call_actions(self.policy, obs, explore=explore, noise=noise)
        cols[Columns.ACTIONS][t, sl] = actions
        for key, values in extras.items():
            if key in cols:
                cols[key][t, sl] = values
            else:
                buf.put(key, t, sl, values)
        self.groups[g].send(self._env_actions(actions))

    def _act_with_inputs(self, t: int, sl: slice, obs: np.ndarray, buf: FragmentBuffer,
                         explore: bool | None, noise: np.ndarray | None = None
                         ) -> tuple[Any, dict[str, Any]]:
        """``compute_actions`` with the per-env inputs the policy declared; those inputs and
        its state outputs recorded in row ``t``."""
        cols = buf.cols
        states = [s[sl] for s in self._states]
        prev = {k: v[sl] for k, v in self._prev_values.items()}
        actions, state_outs, extras = call_actions(
            self.policy, obs, states or None, prev.get(Columns.PREV_ACTIONS),
            prev.get(Columns.PREV_REWARDS), explore=explore, noise=noise)
        if len(state_outs or []) != len(states):
            raise VectorSamplerError(f"{type(self.policy).__name__}.compute_actions returned "
                                     f"{len(state_outs or [])} state outputs; "
                                     f"get_initial_state has {len(states)}")
        for i, (s_in, s_out) in enumerate(zip(states, state_outs or [])):
            cols[Columns.state_in(i)][t, sl] = s_in
            cols[Columns.state_out(i)][t, sl] = s_out
            self._states[i][sl] = s_out
        for key, values in prev.items():
            cols[key][t, sl] = values
        if self._with_ids:
            cols[Columns.EPS_ID][t, sl] = self._ids[sl]
        if self._steps is not None:
            cols[Columns.T][t, sl] = self._steps[sl]
            self._steps[sl] += 1
        if Columns.PREV_ACTIONS in self._prev_values:
            self._prev_values[Columns.PREV_ACTIONS][sl] = actions
        return actions, extras

    def _env_actions(self, actions: Any) -> Any:
        """The actions as the env steps them: integers for Discrete, Box actions rescaled
        or clipped (normalize_actions, clip_actions), others as sampled."""
        if self._int_actions:
            return np.asarray(actions, np.int64)
        if self._box_actions:
            return actions_for_env(np.asarray(actions), self.action_space,
                                   self.normalize_actions, self.clip_actions)
        return actions

    def _recv(self, g: int, t: int, buf: FragmentBuffer, live: np.ndarray,
              finals: list[tuple[np.ndarray, np.ndarray]] | None = None) -> None:
        """Group ``g``'s step results into row ``t``; ended episodes reported, their last
        observation kept for bootstrapping (``trunc_obs``, or ``next_obs`` on the last row)."""
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
        done_mask = np.logical_or(terminated, truncated)
        # One sum each: NaN or inf anywhere makes it non-finite (the exact check follows).
        if self._float_obs and not np.isfinite(obs.sum()) and not np.isfinite(obs).all():
            self._nonfinite(off, obs, "observation")
        if not np.isfinite(reward.sum()) and not np.isfinite(reward).all():
            self._nonfinite(off, reward, "reward")
        counted = live[sl]
        resetting = info.get("reset_step")  # next-step autoreset: this step only reset the env
        if resetting is not None and resetting.any():
            self._reset_rows += int(np.count_nonzero(resetting & counted))
            counted = counted & ~resetting
            reward = np.where(resetting, np.float32(0.0), reward)
        trained = reward
        if self.reward_normalizer is not None:
            trained = self.reward_normalizer.batch(sl, reward, done_mask, resetting)
        cols[Columns.REWARDS][t, sl] = self._clipped(trained)
        cols[Columns.TERMINATEDS][t, sl] = terminated
        cols[Columns.TRUNCATEDS][t, sl] = truncated
        cols[Columns.MASK][t, sl] = counted
        self._returns[sl] += reward
        self._lengths[sl] += counted if resetting is not None else 1
        if self._per_env_inputs:
            if Columns.PREV_REWARDS in self._prev_values:
                self._prev_values[Columns.PREV_REWARDS][sl] = reward
            if resetting is not None and resetting.any():  # the new episode starts here
                self._reset_inputs(off + np.flatnonzero(resetting))
        filtered = type(self.obs_filter) is not NoFilter
        self._obs[g] = self.obs_filter(obs) if filtered else obs
        final = info.get("final_obs")
        if self._per_step:
            self._step_callbacks(off, n, buf.cols[Columns.ACTIONS][t, sl], obs, reward,
                                 done_mask, final, resetting, info.get("infos"))
        if not done_mask.any():
            return
        done = np.flatnonzero(done_mask)
        last = (np.asarray(final)[done] if final is not None else obs[done])
        if filtered:
            last = self.obs_filter(last, update=False)
        envs = off + done
        if finals is not None:
            finals.append((envs, last))
        else:
            cut = truncated[done] & ~terminated[done]
            if cut.any():
                buf.add_truncated(t, envs[cut], last[cut])
        self._end_episodes(envs, t, live)

    def _nonfinite(self, off: int, values: np.ndarray, what: str) -> None:
        rows = np.flatnonzero(~np.isfinite(values.reshape(len(values), -1)).all(axis=1))
        b = off + int(rows[0])
        raise NonFiniteError(f"env {b} of this runner's vector env returned a non-finite "
                             f"{what} ({describe(values[rows[0]])}); a vector env cannot "
                             "skip one env's episode: fix the env (or clip its values)")

    def _clipped(self, reward: np.ndarray) -> np.ndarray:
        if self.clip_rewards is True:
            return np.sign(reward)
        if self.clip_rewards:
            return np.clip(reward, -self.clip_rewards, self.clip_rewards)
        return reward

    def close(self) -> None:
        """Close the envs; a step sent and not received (a fragment cancelled at stop) is
        received first: ale-py's close waits for its threads, which wait for that recv."""
        for g, env in enumerate(self.groups):
            if self._pending[g]:
                env.recv()
            env.close()

