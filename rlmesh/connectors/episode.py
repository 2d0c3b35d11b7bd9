"""The episodes a connector is given: RLlib's ``SingleAgentEpisode`` reading and writing
methods over rlmesh's data.

- ``RunnerEpisode``: on an env runner, one env's running episode, its observations as the
  env returned them (and as connectors rewrote them), its actions and rewards. Kept only
  while connectors are configured.
- ``ColumnEpisode``: on a learner, one episode's rows of one env column of a time-major
  batch ``[T, B]``; ``set_rewards`` (and ``set_observations``) write into the batch, so a
  learner connector that shapes rewards changes what the loss trains on.

Indices are RLlib's: 0 is the episode's first entry, -1 its last; a slice reaching before
the first entry is padded with ``fill`` when given. ``one_hot_discrete`` turns Discrete
actions (or observations) into one-hot float32 vectors."""

from __future__ import annotations

import itertools
from typing import Any

import gymnasium as gym
import numpy as np

_ids = itertools.count()


def one_hot(value: Any, space: gym.Space | None) -> Any:
    if isinstance(space, gym.spaces.Discrete):
        out = np.zeros(int(space.n), np.float32)
        out[int(value) - int(space.start)] = 1.0
        return out
    if isinstance(space, gym.spaces.MultiDiscrete):
        return np.concatenate([np.eye(int(n), dtype=np.float32)[int(v)]
                               for v, n in zip(np.ravel(value), space.nvec.ravel())])
    return value


def _pick(items: list[Any], indices: Any, fill: Any, space: gym.Space | None,
          one_hot_discrete: bool) -> Any:
    """``items`` at RLlib-style ``indices`` (an int, a list of ints, a slice; None: all)."""
    conv = (lambda v: one_hot(v, space)) if one_hot_discrete else (lambda v: v)
    n = len(items)
    if indices is None:
        return [conv(v) for v in items]
    if isinstance(indices, slice):
        start, stop, step = indices.start, indices.stop, indices.step or 1
        if fill is None:
            return [conv(items[i]) for i in range(*indices.indices(n))]
        start = 0 if start is None else (n + start if start < 0 else start)
        stop = n if stop is None else (n + stop if stop < 0 else stop)
        return [conv(items[i]) if 0 <= i < n else _filled(fill, space, one_hot_discrete)
                for i in range(start, stop, step)]
    if isinstance(indices, (list, tuple)):
        return [_pick(items, i, fill, space, one_hot_discrete) for i in indices]
    i = int(indices)
    j = n + i if i < 0 else i
    if not 0 <= j < n:
        if fill is not None:
            return _filled(fill, space, one_hot_discrete)
        raise IndexError(f"index {i} of an episode with {n} entries")
    return conv(items[j])


def _filled(fill: Any, space: gym.Space | None, one_hot_discrete: bool) -> Any:
    """What a padded entry holds: ``fill`` in the space's shape (zeros one-hot)."""
    if space is None:
        return fill
    if one_hot_discrete and isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
        size = int(space.n) if isinstance(space, gym.spaces.Discrete) else int(space.nvec.sum())
        return np.zeros(size, np.float32)  # no action there: no category set
    if isinstance(space, gym.spaces.Box):
        return np.full(space.shape, fill, space.dtype)
    if isinstance(space, gym.spaces.Discrete):
        return int(fill)
    return fill


class RunnerEpisode:
    """One env's running episode on an env runner, as connectors read and change it."""

    agent_id = None
    module_id = None
    multi_agent_episode_id = None

    def __init__(self, observation_space: gym.Space | None = None,
                 action_space: gym.Space | None = None) -> None:
        self.id_ = f"{next(_ids):x}"
        self.observation_space = observation_space
        self.action_space = action_space
        self.observations: list[Any] = []
        self.actions: list[Any] = []
        self.rewards: list[float] = []
        self.infos: list[dict] = []
        self.is_terminated = False
        self.is_truncated = False
        self.t_started = 0

    # --- filled by the runner ---

    def add_env_reset(self, observation: Any, infos: dict | None = None) -> None:
        self.observations.append(observation)
        self.infos.append(infos or {})

    def add_env_step(self, observation: Any, action: Any, reward: float,
                     infos: dict | None = None, *, terminated: bool = False,
                     truncated: bool = False, **kwargs: Any) -> None:
        self.observations.append(observation)
        self.actions.append(action)
        self.rewards.append(reward)
        self.infos.append(infos or {})
        self.is_terminated, self.is_truncated = bool(terminated), bool(truncated)

    # --- RLlib's SingleAgentEpisode methods ---

    @property
    def is_done(self) -> bool:
        return self.is_terminated or self.is_truncated

    @property
    def t(self) -> int:
        return self.t_started + len(self.actions)

    def __len__(self) -> int:
        return len(self.actions)

    def get_observations(self, indices: Any = None, *, neg_index_as_lookback: bool = False,
                         fill: Any = None, one_hot_discrete: bool = False) -> Any:
        return _pick(self.observations, indices, fill, self.observation_space, one_hot_discrete)

    def set_observations(self, *, new_data: Any, at_indices: Any = None,
                         neg_index_as_lookback: bool = False) -> None:
        _put(self.observations, new_data, at_indices)

    def get_actions(self, indices: Any = None, *, neg_index_as_lookback: bool = False,
                    fill: Any = None, one_hot_discrete: bool = False) -> Any:
        return _pick(self.actions, indices, fill, self.action_space, one_hot_discrete)

    def set_actions(self, *, new_data: Any, at_indices: Any = None,
                    neg_index_as_lookback: bool = False) -> None:
        _put(self.actions, new_data, at_indices)

    def get_rewards(self, indices: Any = None, *, neg_index_as_lookback: bool = False,
                    fill: Any = None) -> Any:
        return _pick(self.rewards, indices, fill, None, False)

    def set_rewards(self, *, new_data: Any, at_indices: Any = None,
                    neg_index_as_lookback: bool = False) -> None:
        _put(self.rewards, new_data, at_indices)

    def get_infos(self, indices: Any = None, *, neg_index_as_lookback: bool = False,
                  fill: Any = None) -> Any:
        return _pick(self.infos, indices, fill, None, False)

    def get_return(self) -> float:
        return float(sum(self.rewards))

    def __repr__(self) -> str:
        return f"RunnerEpisode(id={self.id_}, len={len(self)})"


def _put(items: Any, new_data: Any, at_indices: Any) -> None:
    """RLlib's set_*: ``new_data`` at ``at_indices`` (None: all of them)."""
    n = len(items)
    if at_indices is None:
        if len(new_data) != n:
            raise IndexError(f"new_data has {len(new_data)} entries, the episode {n}")
        for i in range(n):
            items[i] = new_data[i]
        return
    if isinstance(at_indices, slice):
        positions = list(range(*at_indices.indices(n)))
    elif isinstance(at_indices, (list, tuple)):
        positions = [n + i if i < 0 else i for i in at_indices]
    else:
        i = int(at_indices)
        items[n + i if i < 0 else i] = new_data
        return
    if len(positions) != len(new_data):
        raise IndexError(f"new_data has {len(new_data)} entries for {len(positions)} indices")
    for p, value in zip(positions, new_data):
        items[p] = value


class _ColumnList:
    """A list-like view of rows ``start..stop`` of env ``b`` in a time-major column."""

    def __init__(self, column: np.ndarray, start: int, stop: int, b: int) -> None:
        self.column, self.start, self.stop, self.b = column, start, stop, b

    def __len__(self) -> int:
        return self.stop - self.start

    def _row(self, i: int) -> int:
        n = self.stop - self.start
        if not -n <= i < n:
            raise IndexError(f"index {i} of an episode with {n} steps")
        return self.start + (i + n if i < 0 else i)

    def __getitem__(self, i: int) -> Any:
        return self.column[self._row(i), self.b]

    def __setitem__(self, i: int, value: Any) -> None:
        self.column[self._row(i), self.b] = value

    def __iter__(self):
        return (self.column[t, self.b] for t in range(self.start, self.stop))


class ColumnEpisode(RunnerEpisode):
    """One episode's rows (``start..stop``, env column ``b``) of a learner's time-major
    batch. Its observations are those the module acted on (one per step; the observation
    after the last step is not part of it), ``len`` the steps in this batch (an episode
    cut by the fragment's ends is two views, as RLlib's chunks are). Writes go into the
    batch's arrays."""

    def __init__(self, batch: dict[str, Any], start: int, stop: int, b: int,
                 observation_space: gym.Space | None = None,
                 action_space: gym.Space | None = None, *, done: bool = False) -> None:
        super().__init__(observation_space, action_space)
        self.batch = batch
        self.env_index, self.start, self.stop = b, start, stop
        for name, column in (("observations", "obs"), ("actions", "actions"),
                             ("rewards", "rewards")):
            if column in batch:
                setattr(self, name, _ColumnList(batch[column], start, stop, b))
        self.infos = [{}] * (stop - start)
        self.is_terminated = bool(done and "terminateds" in batch
                                  and batch["terminateds"][stop - 1, b])
        self.is_truncated = bool(done and not self.is_terminated and "truncateds" in batch
                                 and batch["truncateds"][stop - 1, b])

    def __len__(self) -> int:
        return self.stop - self.start

    def __repr__(self) -> str:
        return f"ColumnEpisode(env={self.env_index}, rows={self.start}..{self.stop})"


def column_episodes(batch: dict[str, Any], observation_space: gym.Space | None = None,
                    action_space: gym.Space | None = None) -> list[ColumnEpisode]:
    """A time-major batch ``[T, B]`` split into episode views: each env column cut after
    each terminated or truncated row, padding (``mask`` False) left out. Flat samples
    ``[N]`` (a replay buffer's transitions) are one-step views each."""
    rewards = np.asarray(batch["rewards"])
    if rewards.ndim == 1:  # independent transitions: views of [N, 1] reshapes write through
        n = len(rewards)
        batch = {k: v.reshape(n, 1, *np.shape(v)[1:]) for k, v in batch.items()
                 if k in ("obs", "actions", "rewards") and isinstance(v, np.ndarray)
                 and len(v) == n}
        batch["terminateds"] = batch["truncateds"] = np.ones((n, 1), bool)
        return column_episodes(batch, observation_space, action_space)
    T, B = rewards.shape[:2]
    mask = np.asarray(batch.get("mask", np.ones((T, B), bool)), bool)
    ends = np.asarray(batch.get("terminateds", np.zeros((T, B), bool)), bool) | \
        np.asarray(batch.get("truncateds", np.zeros((T, B), bool)), bool)
    out = []
    for b in range(B):
        start = None
        for t in range(T):
            if not mask[t, b]:
                if start is not None:
                    out.append(ColumnEpisode(batch, start, t, b, observation_space, action_space))
                    start = None
                continue
            if start is None:
                start = t
            if ends[t, b]:
                out.append(ColumnEpisode(batch, start, t + 1, b, observation_space,
                                         action_space, done=True))
                start = None
        if start is not None:
            out.append(ColumnEpisode(batch, start, T, b, observation_space, action_space))
    return out
