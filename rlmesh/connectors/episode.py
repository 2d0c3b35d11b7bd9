"""The episodes a connector is given: RLlib's ``SingleAgentEpisode``
(``rlmesh/env/single_agent_episode.py``) everywhere.

- On an env runner: each env slot's own episode, the one the callbacks get
  (``rlmesh.callbacks.Episode``), its step history kept while connectors are configured;
  what env-to-module connectors write into it (``set_observations(at_indices=-1)``) is what
  the callbacks then read, as in RLlib. ``RunnerEpisode`` is a SingleAgentEpisode built
  from the spaces alone (the older name, kept for code that builds one).
- ``ColumnEpisode``: on a learner, one episode's rows of one env column of a time-major
  batch ``[T, B]``; a SingleAgentEpisode whose data are views over the batch's columns, so
  ``set_rewards`` (and ``set_observations``) write into the batch and a learner connector
  that shapes rewards changes what the loss trains on.

Indices are RLlib's: 0 is the episode's first entry, -1 its last; a slice reaching before
the first entry is padded with ``fill`` when given. ``one_hot_discrete`` turns Discrete
actions (or observations) into one-hot float32 vectors."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from rlmesh.env.single_agent_episode import SingleAgentEpisode, one_hot  # noqa: F401


class RunnerEpisode(SingleAgentEpisode):
    """A SingleAgentEpisode made from its spaces (positional, as this class took them)."""

    __slots__ = ()

    def __init__(self, observation_space: gym.Space | None = None,
                 action_space: gym.Space | None = None, **kwargs: Any) -> None:
        super().__init__(observation_space=observation_space, action_space=action_space,
                         **kwargs)


class _ColumnList:
    """A list-like view of rows ``start..stop`` of env ``b`` in a time-major column: what
    SingleAgentEpisode's index rules use of a list (an int, a slice, iteration, ``len``,
    item assignment). A slice is an array over the same rows, no copy."""

    __slots__ = ("column", "start", "stop", "b")

    def __init__(self, column: np.ndarray, start: int, stop: int, b: int) -> None:
        self.column, self.start, self.stop, self.b = column, start, stop, b

    def __len__(self) -> int:
        return self.stop - self.start

    def _row(self, i: int) -> int:
        n = self.stop - self.start
        if not -n <= i < n:
            raise IndexError(f"index {i} of an episode with {n} steps")
        return self.start + (i + n if i < 0 else i)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            lo, hi, step = i.indices(self.stop - self.start)
            if step > 0:
                hi = max(hi, lo)
                return self.column[self.start + lo:self.start + hi:step, self.b]
            return self.column[self.start:self.stop, self.b][i]
        return self.column[self._row(int(i)), self.b]

    def __setitem__(self, i: int, value: Any) -> None:
        self.column[self._row(int(i)), self.b] = value

    def __iter__(self):
        return iter(self.column[self.start:self.stop, self.b])


class ColumnEpisode(SingleAgentEpisode):
    """One episode's rows (``start..stop``, env column ``b``) of a learner's time-major
    batch. Its observations are those the module acted on (one per step; the observation
    after the last step is not part of it), ``len`` the steps in this batch (an episode
    cut by the fragment's ends is two views, as RLlib's chunks are). Reads are arrays
    (``is_numpy``); writes go into the batch's arrays."""

    def __init__(self, batch: dict[str, Any], start: int, stop: int, b: int,
                 observation_space: gym.Space | None = None,
                 action_space: gym.Space | None = None, *, done: bool = False) -> None:
        # Not SingleAgentEpisode.__init__: its checks are for lists a runner appends to.
        self.id_ = f"{id(batch):x}-{b}-{start}"
        self.agent_id = self.module_id = self.multi_agent_episode_id = None
        self.observation_space, self.action_space = observation_space, action_space
        self.batch = batch
        self.env_index, self.start, self.stop = b, start, stop
        for name, column in (("observations", "obs"), ("actions", "actions"),
                             ("rewards", "rewards")):  # a column the batch lacks: no entries
            setattr(self, name, _ColumnList(batch[column], start, stop, b)
                    if column in batch else [])
        self.infos = [{}] * (stop - start)
        self.extra_model_outputs: dict[str, Any] = {}
        self.custom_data: dict[str, Any] = {}
        self.is_numpy = True
        self._lookback = 0
        self.t_started = 0
        self._ret = 0.0
        self.is_terminated = bool(done and "terminateds" in batch
                                  and batch["terminateds"][stop - 1, b])
        self.is_truncated = bool(done and not self.is_terminated and "truncateds" in batch
                                 and batch["truncateds"][stop - 1, b])

    def __len__(self) -> int:
        return self.stop - self.start

    def get_return(self, include_hanging_rewards: bool = False) -> float:
        """The sum of the rows' rewards as the batch holds them now."""
        return float(np.sum(self.rewards[:]))

    def set_rewards(self, *, new_data: Any, at_indices: Any = None,
                    neg_index_as_lookback: bool = False) -> None:
        self._set(self.rewards, "rewards", new_data, at_indices, neg_index_as_lookback)

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
