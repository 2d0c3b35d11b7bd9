"""The sampling logic of an env runner, as plain code tested without sockets: stepping a
vector of envs with one batched ``compute_actions`` per row, resets and episodes, recurrent
state, env failures (the envs' recovery: ``env_slots.py``; the rows: ``fragment_buffer.py``)."""

from __future__ import annotations

import itertools
import logging
import traceback
from typing import Any, Callable

import gymnasium as gym
import numpy as np

from rlmesh.callbacks import Callbacks, Episode, hook_arguments, runner_metrics_logger
from rlmesh.env.registry import actions_for_env
from rlmesh.policy.policy import Policy
from rlmesh.rl.columns import ColumnSpec, Columns, env_columns, optional_columns, space_layout
from rlmesh.rl.filters import NoFilter, ReturnNormalizer
from rlmesh.rl.finite import FLOAT32_MAX, NonFiniteError, describe
from rlmesh.rl.nested_spaces import ObservationError, describe_mismatch, is_nested, to_column
from rlmesh.roles.env_slots import MAX_STEP_ERRORS_IN_A_ROW, EnvError, EnvSlot
# Runners and tests import the seed strides from here, with the sampler that uses them.
from rlmesh.roles.env_slots import RESEED_STRIDE, SEED_STRIDE  # noqa: F401
from rlmesh.roles.fragment_buffer import FragmentBuffer
from rlmesh.roles.held_noise import HeldNoise
from rlmesh.roles.runner_policy import actions_caller

log = logging.getLogger(__name__)

class EnvSampler:
    """Steps ``num_envs`` envs in a Python loop with one batched policy call per step and
    assembles fragments (layout: see ``sample``). No sockets, no asyncio."""

    def __init__(self, make_env: Callable[[int], gym.Env], num_envs: int,
                 policy: Policy | None = None, *, seeds: list[int | None] | None = None,
                 callbacks: Callbacks | None = None, env_runner: Any = None,
                 normalize_actions: bool = True, clip_actions: bool = True,
                 clip_rewards: bool | float | None = None, on_nonfinite: str = "raise",
                 obs_filter: Any = None, reward_normalizer: ReturnNormalizer | None = None,
                 noise_hold: int = 1) -> None:
        self.make_env = make_env
        # observation_filter (rl/filters.py): applied, and its statistics updated, as each
        # observation comes from an env; fragments hold the filtered observations.
        self.obs_filter = obs_filter if obs_filter is not None else NoFilter()
        seeds = seeds or [None] * num_envs
        self.slots = [EnvSlot(make_env(i), seeds[i]) for i in range(num_envs)]
        self.base_seeds = list(seeds)
        self.observation_space = self.slots[0].env.observation_space
        self.action_space = self.slots[0].env.action_space
        self.policy = policy
        self.callbacks = callbacks
        # Episodes keep their step history (episode.get_observations(...)) only where it
        # can be read: callbacks here; connectors set it too.
        self.keep_history = callbacks is not None
        self.env_runner = env_runner if env_runner is not None else self
        # The runner's MetricsLogger (env_runner.metrics), the callbacks' metrics_logger.
        self.metrics_logger = runner_metrics_logger(env_runner)
        self._hook_args: list[dict[str, Any]] = [{} for _ in range(num_envs)]
        self.normalize_actions = normalize_actions
        self.clip_actions = clip_actions
        self.clip_rewards = clip_rewards
        # normalize_rewards (rl/filters.py): what the learner trains on; episodes keep raw.
        self.reward_normalizer = reward_normalizer
        self.on_nonfinite = on_nonfinite  # a NaN/inf obs or reward: "raise" or "skip" its episode
        self.counters = {"num_env_steps_sampled": 0, "num_episodes": 0, "env_errors": 0,
                         "num_nonfinite_steps_skipped": 0}
        # The first env error's traceback, until a fragment carries it to the driver.
        self.first_env_error: str | None = None
        self._first_traceback: str | None = None
        self.stepping = -1  # the env in step() now (-1: none), for heartbeats to report
        # Env steps taken, fragment finished or not (a runner that crashes mid-fragment
        # delivers none): what its supervisor counts its crashes against. An array, so that
        # the runner can map it into a file that outlives a crash (runtime/work_counter.py).
        self.steps_taken = np.zeros(1, np.int64)
        self._episode_ids = itertools.count()
        self._started = False
        self._next_obs: list[Any] = []
        # Each env's current observation (slot.obs) also kept as a row of one array: a
        # fragment row is then one copy, not a stack of per-env arrays (~7% of sampling).
        layout = space_layout(self.observation_space)
        self._obs = np.zeros((num_envs, *layout.shape), layout.dtype)
        # Tuple/Dict observations are packed into one record per step (rl/nested_spaces.py).
        self._nested = is_nested(self.observation_space)
        self._float_obs = layout.dtype.kind == "f"  # integer observations cannot be NaN
        self._episodes: list[dict[str, Any]] = []
        self._specs: dict[str, ColumnSpec] = {}  # set with the policy (see _bind)
        self._bound: Policy | None = None
        # RLlib's ConnectorV2 pipelines (connectors/wiring.py), None unless configured.
        self.connectors: Any = None
        # noise_hold_steps: each env's draw for a Gaussian policy, held (roles/held_noise.py).
        self.held_noise = HeldNoise.for_space(self.action_space, num_envs, noise_hold, seeds[0])

    def use_connectors(self, connectors: Any) -> None:
        """Run env-to-module and module-to-env connectors (``RunnerConnectors``): the
        observations the policy sees, and fragments store, become the pipeline's output
        (its space is this sampler's ``observation_space`` from now on)."""
        self.connectors = connectors
        connectors.metrics = self.metrics_logger  # the connectors' metrics=, as RLlib's
        # Connectors read and rewrite each env's own episode (the callbacks' one), so it
        # keeps its step history (one episode's worth: a new one per reset).
        self.keep_history = True
        self.env_observation_space = self.observation_space
        self.observation_space = connectors.output_observation_space
        layout = space_layout(self.observation_space)
        self._obs = np.zeros((len(self.slots), *layout.shape), layout.dtype)
        self._nested = is_nested(self.observation_space)
        self._float_obs = layout.dtype.kind == "f"
        self._started = False

    def _bind(self, policy: Policy) -> None:
        """The columns and per-env state ``policy`` needs: its declared columns, its
        recurrent state (``get_initial_state``), previous actions and rewards if declared."""
        if self.held_noise is not None:
            self.held_noise.check(policy)
        self._bound = policy
        self._compute = actions_caller(policy)  # by the signature its author wrote
        n = len(self.slots)
        wanted = dict(policy.view_requirements)
        optional = optional_columns(self.action_space)
        self._specs = {**env_columns(self.observation_space, self.action_space),
                       **{k: v for k, v in wanted.items() if k not in optional}}
        self._initial = [np.asarray(s) for s in policy.get_initial_state()]
        self._states = [np.repeat(s[None], n, 0) for s in self._initial]
        for i, s in enumerate(self._initial):
            spec = ColumnSpec(tuple(s.shape), s.dtype)
            self._specs[Columns.state_in(i)] = self._specs[Columns.state_out(i)] = spec
        # Optional columns cost a write per row: kept only when the policy asks.
        self._prev = {k: optional[k] for k in (Columns.PREV_ACTIONS, Columns.PREV_REWARDS)
                      if k in wanted}
        self._prev_values = {k: np.zeros((n, *spec.shape), spec.dtype) for k, spec in self._prev.items()}
        self._specs.update(self._prev)
        # Per-episode counters a policy may ask for: the episode's id and the step's index.
        self._counters = {k: np.zeros(n, np.int64) for k in (Columns.EPS_ID, Columns.T)
                          if k in wanted}
        self._specs.update({k: optional[k] for k in self._counters})
        if Columns.EPS_ID in self._counters:
            self._counters[Columns.EPS_ID][:] = [s.episode.episode_id if s.episode else 0
                                                 for s in self.slots]
        self._per_env_inputs = bool(self._states or self._prev_values or self._counters)

    @property
    def envs(self) -> list[gym.Env]:
        return [s.env for s in self.slots]

    def restart_episodes(self) -> None:
        """Reset every env at the next ``sample``: fresh episodes (evaluation), the running
        ones dropped unreported."""
        self._started = False

    def sample(self, num_steps: int, complete_episodes: bool = False,
               explore: bool | None = None) -> dict[str, Any]:
        """One fragment: ``num_steps`` rows of every env (truncate_episodes), or, with
        ``complete_episodes``, ``num_steps`` rows and then further rows that step only
        the envs whose episode has not ended yet, until each has; the entries of envs
        already done are padding (mask False) and those envs are not stepped.

        An env whose episode ends is reset at once: the next row's obs is the reset
        observation and the final one is in ``trunc_obs`` (truncated before the last
        row) or ``next_obs`` (last row). Returns the columns of ``FragmentBuffer.build``
        plus ``env_steps`` and ``episodes`` (those that ended in this fragment).
        """
        if self.policy is None:
            raise RuntimeError("EnvSampler has no policy")
        if self._bound is not self.policy:
            self._bind(self.policy)
        if self.connectors is not None:  # what connectors are given as rl_module and explore
            self.connectors.rl_module = getattr(self.policy, "model", self.policy)
            self.connectors.explore = explore
        buf = FragmentBuffer(num_steps, len(self.slots), self._specs)
        skipped = self.counters["num_nonfinite_steps_skipped"]
        for slot in self.slots:
            slot.start_row = 0
        if not self._started:
            for b in range(len(self.slots)):
                self._reset(b, 0)
            self._started = True
        self._next_obs = [s.obs for s in self.slots]
        self._check_obs(-1, slice(None), buf)  # the first resets' (later rows check their own)
        self._episodes = []
        active = list(range(len(self.slots)))
        while active:
            t = buf.add_row()
            ended = self._step_row(t, active, buf, explore)
            if t + 1 >= num_steps:
                active = [b for b in active if b not in ended] if complete_episodes else []
        fragment = buf.build(self._next_obs)
        if self.first_env_error is not None:
            fragment["env_error"] = self.first_env_error
            self.first_env_error = None
        fragment["num_env_errors"] = self.counters["env_errors"]
        fragment["env_steps"] = int(fragment["mask"].sum())
        fragment["num_nonfinite_steps_skipped"] = self.counters["num_nonfinite_steps_skipped"] - skipped
        fragment["episodes"] = self._episodes
        self.counters["num_env_steps_sampled"] += fragment["env_steps"]
        return fragment

    def _step_row(self, t: int, active: list[int], buf: FragmentBuffer,
                  explore: bool | None) -> set[int]:
        """Step every active env once; the envs whose episode ended (or failed) here."""
        cols = buf.cols
        idx: Any = active if len(active) < len(self.slots) else slice(None)
        obs = cols["obs"][t, idx] = self._obs[idx]
        noise = self.held_noise.draws(idx) if self.held_noise is not None else None
        if self._per_env_inputs:  # recurrent state, previous actions/rewards, counters
            actions, extras = self._act_with_inputs(t, idx, obs, buf, explore, noise)
        else:  # the common case: nothing but the observations, one call, no per-row extras
            actions, _, extras = self._compute(obs, None, None, None, explore, noise)
        if self.connectors is not None and self.connectors.module_to_env is not None:
            actions, for_env = self.connectors.actions(active, actions)
        else:
            for_env = actions
        cols["actions"][t, idx] = actions
        for key, values in extras.items():
            col = cols.get(key)
            if col is None:
                buf.put(key, t, idx, values)
            else:
                col[t, idx] = values
        env_actions = actions_for_env(for_env, self.action_space, self.normalize_actions,
                                      self.clip_actions)
        ended = set()
        self.steps_taken[0] += len(active)  # before the steps: a crash in one is counted
        for k, b in enumerate(active):
            if not self._step_env(b, t, env_actions[k], buf):
                ended.add(b)
        return ended | self._check_obs(t, idx, buf)

    def _check_obs(self, t: int, idx: Any, buf: FragmentBuffer) -> set[int]:
        """The envs among ``idx`` whose next observation is NaN or inf, their episodes
        dropped (or NonFiniteError). One isfinite over the batch per row: ~1 us."""
        if not self._float_obs or np.isfinite(self._obs[idx]).all():
            return set()
        rows = np.arange(len(self.slots))[idx]
        bad = rows[~np.isfinite(self._obs[idx].reshape(len(rows), -1)).all(axis=1)]
        for b in bad:
            self._nonfinite(int(b), t, buf, f"observation ({describe(self._obs[b])})")
        return set(int(b) for b in bad)

    def _nonfinite(self, b: int, t: int, buf: FragmentBuffer, what: str) -> bool:
        """Env ``b`` gave a non-finite ``what`` at row ``t``: NonFiniteError (on_nonfinite
        "raise"), or its episode so far is dropped (as after an env error) and counted."""
        if self.on_nonfinite != "skip":
            raise NonFiniteError(
                f"env {b} returned a non-finite {what} in episode step "
                f"{self.slots[b].episode.length if self.slots[b].episode else 0}; fix the env, "
                "or set on_nonfinite='skip' to drop such episodes and count them")
        self.counters["num_nonfinite_steps_skipped"] += 1
        self._discard_episode(b, t, buf, recreate=False)
        return False

    def _act_with_inputs(self, t: int, idx: Any, obs: np.ndarray, buf: FragmentBuffer,
                         explore: bool | None, noise: np.ndarray | None = None
                         ) -> tuple[Any, dict[str, Any]]:
        """``compute_actions`` with the per-env inputs the policy declared, and those inputs
        and its state outputs recorded in row ``t``."""
        cols = buf.cols
        states = [s[idx] for s in self._states]
        prev = {k: v[idx] for k, v in self._prev_values.items()}
        actions, state_outs, extras = self._compute(
            obs, states or None, prev.get(Columns.PREV_ACTIONS), prev.get(Columns.PREV_REWARDS),
            explore, noise)
        if states:
            self._record_states(buf, t, idx, states, state_outs)
        for key, values in prev.items():
            cols[key][t, idx] = values
        for key, values in self._counters.items():
            cols[key][t, idx] = values[idx]
        if Columns.T in self._counters:
            self._counters[Columns.T][idx] += 1
        if Columns.PREV_ACTIONS in self._prev_values:
            self._prev_values[Columns.PREV_ACTIONS][idx] = actions
        return actions, extras

    def _record_states(self, buf: FragmentBuffer, t: int, idx: Any, states: list[np.ndarray],
                       state_outs: list[Any]) -> None:
        if len(state_outs) != len(states):
            raise ValueError(f"{type(self.policy).__name__}.compute_actions returned "
                             f"{len(state_outs)} state outputs; get_initial_state has {len(states)}")
        for i, (s_in, s_out) in enumerate(zip(states, state_outs)):
            buf.cols[Columns.state_in(i)][t, idx] = s_in
            buf.cols[Columns.state_out(i)][t, idx] = s_out
            self._states[i][idx] = s_out

    def _step_env(self, b: int, t: int, action: Any, buf: FragmentBuffer) -> bool:
        """Step env ``b`` and record row ``t``; False if its episode ended or it failed."""
        slot = self.slots[b]
        self.stepping = b
        try:
            raw, reward, terminated, truncated, info = slot.env.step(action)
        except Exception:
            self.stepping = -1
            self._step_failed(b)
            self._discard_episode(b, t, buf)
            return False
        self.stepping = -1
        slot.errors_in_a_row = 0
        obs = to_column(self.observation_space, raw) if self._nested and self.connectors is None else raw
        reward = float(reward)
        if not -FLOAT32_MAX <= reward <= FLOAT32_MAX:  # NaN fails both; beyond is inf in float32
            return self._nonfinite(b, t, buf, f"reward ({reward})")
        cols = buf.cols
        cols["rewards"][t, b] = self._clip_reward(
            reward if self.reward_normalizer is None
            else self.reward_normalizer(b, reward, terminated or truncated))
        cols["terminateds"][t, b] = terminated
        cols["truncateds"][t, b] = truncated
        cols["mask"][t, b] = True
        if Columns.PREV_REWARDS in self._prev_values:
            self._prev_values[Columns.PREV_REWARDS][b] = reward
        if self.connectors is None:
            slot.episode.record_step(raw, reward, info, action, terminated, truncated)
        else:  # the env-to-module pipeline makes what the policy sees, in the episode itself
            # The module's action (before module-to-env and unsquashing), as RLlib records.
            slot.episode.record_step(raw, reward, info, buf.cols["actions"][t, b], terminated,
                                     truncated)
            obs = self.connectors.observe(b)
            obs = to_column(self.observation_space, obs) if self._nested else obs
        if (self._float_obs and type(self.obs_filter) is not NoFilter
                and not np.isfinite(np.asarray(obs, self._obs.dtype)).all()):
            # Checked before the filter sees it: one NaN would spoil its statistics for good.
            return self._nonfinite(b, t, buf, f"observation ({describe(obs)})")
        obs = self._next_obs[b] = self.obs_filter(obs)
        if self.callbacks is not None:
            self.callbacks.on_episode_step(episode=slot.episode, **self._hook_args[b])
        if not (terminated or truncated):
            slot.obs = obs
            self._store_obs(b, obs)
            return True
        # A copy: the reset below may overwrite an array the env hands out again.
        final = self._next_obs[b] = np.array(to_column(self.observation_space, obs)
                                             if not self._nested else obs)
        if self._float_obs and not np.isfinite(np.asarray(final, self._obs.dtype)).all():
            return self._nonfinite(b, t, buf, f"final observation ({describe(final)})")
        if truncated and not terminated:
            buf.trunc.append((t, b, final))
        self._end_episode(b)
        self._reset(b, t + 1)
        return False

    def _step_failed(self, b: int) -> None:
        """Log the first failure with its traceback (later ones are counted, and their
        count reaches the driver); EnvError once env ``b`` failed too often in a row."""
        slot = self.slots[b]
        slot.errors_in_a_row += 1
        if self._first_traceback is None:
            self._first_traceback = traceback.format_exc()
            self.first_env_error = f"env {b} raised in step():\n{self._first_traceback}"
            log.error("env %d raised in step(); its unfinished episode is discarded and the "
                      "env recreated (later errors are only counted):\n%s", b,
                      self._first_traceback)
        if slot.errors_in_a_row >= MAX_STEP_ERRORS_IN_A_ROW:
            raise EnvError(f"env {b} raised in step() {slot.errors_in_a_row} times in a row, "
                           f"recreated after each ({self.counters['env_errors'] + 1} env "
                           f"errors in all)\n{self._first_traceback}")

    def _store_obs(self, b: int, obs: Any) -> None:
        """Env ``b``'s observation into the row the next action reads; one error naming the
        expected and received shape and dtype when it does not fit the space (checked in
        full at resets and episode ends, here by the copy itself, which costs nothing)."""
        try:
            self._obs[b] = obs
        except (ValueError, TypeError):
            raise ObservationError(
                f"env {b}: {describe_mismatch(self.observation_space, obs)}; make "
                "the env return what its observation_space declares (or declare what it "
                "returns)") from None

    def _clip_reward(self, reward: float) -> float:
        if self.clip_rewards is True:
            return float(np.sign(reward))
        if self.clip_rewards:  # a number c: [-c, c]
            return float(np.clip(reward, -self.clip_rewards, self.clip_rewards))
        return reward

    def _end_episode(self, b: int) -> None:
        episode = self.slots[b].episode
        if self.callbacks is not None:
            self.callbacks.on_episode_end(episode=episode, **self._hook_args[b])
        self._episodes.append(episode.summary())
        self.counters["num_episodes"] += 1

    def _discard_episode(self, b: int, t: int, buf: FragmentBuffer, recreate: bool = True) -> None:
        """After a failed step (or non-finite data): the rows of the unfinished episode in
        this fragment become invalid (an earlier part, already shipped, ended there as a cut
        fragment would), the env is recreated (after a failure) and reset, and its next
        episode starts at row t + 1."""
        buf.cols["mask"][self.slots[b].start_row:t + 1, b] = False
        if recreate:
            self.counters["env_errors"] += 1
            self.slots[b].recreate(self.make_env, b, self.base_seeds[b])
        self._reset(b, t + 1)
        self._next_obs[b] = self.slots[b].obs

    def _reset(self, b: int, start_row: int) -> None:
        slot = self.slots[b]
        episode = Episode(b, next(self._episode_ids), history=self.keep_history)
        if self.callbacks is not None:
            hook_args = self._hook_args[b] = hook_arguments(self, b, slot.env)
            self.callbacks.on_episode_created(episode=episode, **hook_args)
        obs, info = slot.reset_env(self.make_env, b, self.base_seeds[b], self.counters)
        if self.reward_normalizer is not None:  # a discarded episode's return ends too
            self.reward_normalizer.reset(b)
        episode.add_env_reset(obs, info)
        slot.episode = episode
        if self.connectors is not None:  # the pipeline reads (and rewrites) this episode
            episode.observation_space = self.env_observation_space
            episode.action_space = self.action_space
            self.connectors.episodes[b] = episode
            obs = self.connectors.observe(b)
        slot.obs = self.obs_filter(to_column(self.observation_space, obs))
        slot.start_row = start_row
        self._obs[b] = slot.obs
        if self.held_noise is not None:
            self.held_noise.restart(b)
        for state, initial in zip(self._states, self._initial):
            state[b] = initial
        for values in self._prev_values.values():
            values[b] = 0
        counters = getattr(self, "_counters", {})
        if Columns.T in counters:
            counters[Columns.T][b] = 0
        if Columns.EPS_ID in counters:
            counters[Columns.EPS_ID][b] = slot.episode.episode_id
        if self.callbacks is not None:
            # The env may be a new one (recreated after an error in reset_env).
            hook_args = self._hook_args[b] = hook_arguments(self, b, slot.env)
            self.callbacks.on_episode_start(episode=slot.episode, **hook_args)
