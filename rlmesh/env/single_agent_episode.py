"""``SingleAgentEpisode``: one agent's trajectory in one env, as RLlib's new API stack hands
it to callbacks and connectors (``rlmesh.env.single_agent_episode``; RLlib's names and index
rules). Data lives in Python lists appended per step; ``to_numpy()`` stacks them.

Layout: ``observations`` and ``infos`` hold one entry more than ``actions``, ``rewards``
and each extra model output (the reset observation). A lookback buffer of ``L`` entries
may precede the episode's own data (``len_lookback_buffer``): the getters leave it out
unless asked (``neg_index_as_lookback=True``, or ``fill`` past the start).

Index rules of every ``get_*``: ``None`` is everything (lookback left out); an int
counts from the first step (``-1`` the last); a slice is Python's over the same range; a
list gives one entry per index. With ``neg_index_as_lookback=True`` a negative index
counts back from the first step into the lookback buffer (``-1`` is the entry before the
episode's first). With ``fill`` given, positions outside the data give ``fill`` (an array
of the entries' shape filled with it) instead of IndexError or being cut off.
"""

from __future__ import annotations

import uuid
from typing import Any, Iterable

import gymnasium as gym
import numpy as np

_NO_FILL = object()


class _Padded:
    """Stands in for a filled-in position while ``one_hot_discrete`` converts entries."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<padded>"


_PADDED = _Padded()


def one_hot(value: Any, space: Any) -> Any:
    """A Discrete (or MultiDiscrete) ``value`` of ``space`` as a one-hot float32 vector (the
    MultiDiscrete parts' vectors joined); other spaces' values as they are."""
    if isinstance(space, gym.spaces.Discrete):
        out = np.zeros(int(space.n), np.float32)
        out[int(value) - int(space.start)] = 1.0
        return out
    if isinstance(space, gym.spaces.MultiDiscrete):
        return np.concatenate([np.eye(int(n), dtype=np.float32)[int(v)]
                               for v, n in zip(np.ravel(value), space.nvec.ravel())])
    return value


def _one_hot_entry(value: Any, space: Any) -> np.ndarray:
    if value is _PADDED:  # no action (or observation) there: no category set
        size = int(space.n) if isinstance(space, gym.spaces.Discrete) else int(space.nvec.sum())
        return np.zeros(size, np.float32)
    return one_hot(value, space)


def _new_id() -> str:
    return uuid.uuid4().hex


class SingleAgentEpisode:
    """See the module docstring. Attributes as in RLlib: ``id_``, ``agent_id``,
    ``module_id``, ``multi_agent_episode_id``, ``t_started`` (the env step of its first
    entry), ``t`` (``t_started + len(self)``), ``is_terminated``, ``is_truncated``,
    ``custom_data`` (free for callbacks and connectors)."""

    __slots__ = ("id_", "agent_id", "module_id", "multi_agent_episode_id", "observation_space",
                 "action_space", "observations", "actions", "rewards", "infos",
                 "extra_model_outputs", "is_terminated", "is_truncated", "t_started",
                 "custom_data", "_lookback", "is_numpy", "_ret")

    def __init__(self, id_: str | None = None, *, observations: list | None = None,
                 observation_space: Any = None, infos: list | None = None,
                 actions: list | None = None, action_space: Any = None,
                 rewards: list | None = None, terminated: bool = False,
                 truncated: bool = False, extra_model_outputs: dict[str, list] | None = None,
                 t_started: int | None = None, len_lookback_buffer: int | str = "auto",
                 agent_id: Any = None, module_id: Any = None,
                 multi_agent_episode_id: str | None = None, **kwargs: Any) -> None:
        self.id_ = id_ if id_ is not None else _new_id()
        self.agent_id = agent_id
        self.module_id = module_id
        self.multi_agent_episode_id = multi_agent_episode_id
        self.observation_space = observation_space
        self.action_space = action_space
        self.observations = list(observations) if observations is not None else []
        self.actions = list(actions) if actions is not None else []
        self.rewards = [float(r) for r in rewards] if rewards is not None else []
        self.infos = (list(infos) if infos is not None
                      else [{} for _ in range(len(self.observations))])
        self.extra_model_outputs = {k: list(v) for k, v in (extra_model_outputs or {}).items()}
        self.is_terminated = bool(terminated)
        self.is_truncated = bool(truncated)
        self.custom_data: dict[str, Any] = {}
        self.is_numpy = False
        if len(self.infos) != len(self.observations):
            raise ValueError(f"infos: {len(self.infos)} entries for {len(self.observations)} "
                             "observations (one info per observation)")
        if self.observations and len(self.actions) != len(self.observations) - 1:
            raise ValueError(f"actions: {len(self.actions)} entries for "
                             f"{len(self.observations)} observations (one fewer: the reset "
                             "observation has no action)")
        if len(self.rewards) != len(self.actions):
            raise ValueError(f"rewards: {len(self.rewards)} entries for {len(self.actions)} "
                             "actions (one reward per action)")
        # As RLlib: data handed to the constructor is lookback unless told how much is.
        if len_lookback_buffer == "auto":
            lookback = len(self.actions)
        else:
            lookback = int(len_lookback_buffer)
            if not 0 <= lookback <= len(self.actions):
                raise ValueError(f"len_lookback_buffer: {lookback} is outside 0.."
                                 f"{len(self.actions)} (the actions handed in)")
        self._lookback = lookback
        self.t_started = t_started if t_started is not None else 0
        self._ret = float(sum(self.rewards[lookback:]))

    # --- building -----------------------------------------------------------------------
    def add_env_reset(self, observation: Any, infos: dict | None = None) -> None:
        """The env's reset: the episode's first observation (and info)."""
        if len(self.observations) > self._lookback:
            raise ValueError("add_env_reset: the episode already has its reset observation")
        self.observations.append(observation)
        self.infos.append(infos if infos is not None else {})

    def add_env_step(self, observation: Any, action: Any, reward: float,
                     infos: dict | None = None, *, terminated: bool = False,
                     truncated: bool = False, extra_model_outputs: dict | None = None) -> None:
        """One env step: the action taken, and the observation, reward and info it led to."""
        if self.is_terminated or self.is_truncated:
            raise ValueError("add_env_step: the episode is done (terminated or truncated)")
        self.observations.append(observation)
        self.actions.append(action)
        self.rewards.append(reward)
        self._ret += reward
        self.infos.append(infos if infos is not None else {})
        if extra_model_outputs:
            for key, value in extra_model_outputs.items():
                column = self.extra_model_outputs.get(key)
                if column is None:  # a key first seen now: earlier steps have no value
                    column = self.extra_model_outputs[key] = [None] * (len(self.actions) - 1)
                column.append(value)
        self.is_terminated = bool(terminated)
        self.is_truncated = bool(truncated)

    # --- state --------------------------------------------------------------------------
    @property
    def is_done(self) -> bool:
        return self.is_terminated or self.is_truncated

    @property
    def t(self) -> int:
        return self.t_started + len(self)

    env_t = t

    def __len__(self) -> int:
        return len(self.actions) - self._lookback

    def get_return(self, include_hanging_rewards: bool = False) -> float:
        """The sum of the episode's rewards (the lookback buffer's left out)."""
        return self._ret

    def get_duration_s(self) -> float:  # RLlib has it; rlmesh keeps no timestamps per episode
        return 0.0

    # --- getters ------------------------------------------------------------------------
    def get_observations(self, indices: Any = None, *, neg_index_as_lookback: bool = False,
                         fill: Any = None, one_hot_discrete: bool = False,
                         **kwargs: Any) -> Any:
        if one_hot_discrete:
            return self._get_one_hot(self.observations, self.observation_space, indices,
                                     neg_index_as_lookback, fill)
        return self._get(self.observations, indices, neg_index_as_lookback, fill)

    def get_infos(self, indices: Any = None, *, neg_index_as_lookback: bool = False,
                  fill: Any = None, **kwargs: Any) -> Any:
        return self._get(self.infos, indices, neg_index_as_lookback, fill)

    def get_actions(self, indices: Any = None, *, neg_index_as_lookback: bool = False,
                    fill: Any = None, one_hot_discrete: bool = False, **kwargs: Any) -> Any:
        if one_hot_discrete:
            return self._get_one_hot(self.actions, self.action_space, indices,
                                     neg_index_as_lookback, fill)
        return self._get(self.actions, indices, neg_index_as_lookback, fill)

    def get_rewards(self, indices: Any = None, *, neg_index_as_lookback: bool = False,
                    fill: Any = None, **kwargs: Any) -> Any:
        return self._get(self.rewards, indices, neg_index_as_lookback, fill)

    def get_extra_model_outputs(self, key: str, indices: Any = None, *,
                                neg_index_as_lookback: bool = False, fill: Any = None,
                                **kwargs: Any) -> Any:
        if key not in self.extra_model_outputs:
            raise KeyError(f"extra model output {key!r}: the episode has "
                           f"{sorted(self.extra_model_outputs) or 'none'}")
        return self._get(self.extra_model_outputs[key], indices, neg_index_as_lookback, fill)

    def _get_one_hot(self, data: Any, space: Any, indices: Any, lookback_neg: bool,
                     fill: Any) -> Any:
        """``_get`` with Discrete / MultiDiscrete entries as one-hot float32 vectors (other
        spaces' entries as they are); a position filled in (``fill``) is all zeros, no
        category set. The conversion touches only the entries asked for."""
        if not isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
            return self._get(data, indices, lookback_neg, fill)
        # Filled positions are told apart by identity: a marker stands in for them.
        got = self._get(data, indices, lookback_neg, None if fill is None else _PADDED)
        if indices is None or isinstance(indices, slice) or (
                not isinstance(indices, (int, np.integer)) and isinstance(indices, Iterable)):
            out = [_one_hot_entry(v, space) for v in got]
            return _stack(out) if self.is_numpy else out
        return _one_hot_entry(got, space)

    def get_state(self) -> dict[str, Any]:
        """Everything as plain data (``from_state`` rebuilds the episode)."""
        return {"id_": self.id_, "agent_id": self.agent_id, "module_id": self.module_id,
                "multi_agent_episode_id": self.multi_agent_episode_id,
                "observations": list(self.observations), "actions": list(self.actions),
                "rewards": list(self.rewards), "infos": list(self.infos),
                "extra_model_outputs": {k: list(v) for k, v in self.extra_model_outputs.items()},
                "terminated": self.is_terminated, "truncated": self.is_truncated,
                "t_started": self.t_started, "len_lookback_buffer": self._lookback,
                "custom_data": dict(self.custom_data)}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> SingleAgentEpisode:
        state = dict(state)
        custom = state.pop("custom_data", {})
        episode = SingleAgentEpisode(**state)
        episode.custom_data.update(custom)
        return episode

    def to_numpy(self) -> SingleAgentEpisode:
        """Lists stacked into arrays (observations, actions, rewards, extra outputs; infos
        stay a list); slices and lists of indices then come back as arrays. Returns self."""
        self.observations = _stack(self.observations)
        self.actions = _stack(self.actions)
        self.rewards = np.asarray(self.rewards, np.float32)
        self.extra_model_outputs = {k: _stack(v) for k, v in self.extra_model_outputs.items()}
        self.is_numpy = True
        return self

    # --- setters ------------------------------------------------------------------------
    def set_observations(self, *, new_data: Any, at_indices: Any = None,
                         neg_index_as_lookback: bool = False) -> None:
        self._set(self.observations, "observations", new_data, at_indices, neg_index_as_lookback)

    def set_actions(self, *, new_data: Any, at_indices: Any = None,
                    neg_index_as_lookback: bool = False) -> None:
        self._set(self.actions, "actions", new_data, at_indices, neg_index_as_lookback)

    def set_rewards(self, *, new_data: Any, at_indices: Any = None,
                    neg_index_as_lookback: bool = False) -> None:
        old = sum(self._visible(self.rewards))
        self._set(self.rewards, "rewards", new_data, at_indices, neg_index_as_lookback)
        self._ret += float(sum(self._visible(self.rewards))) - float(old)

    def set_extra_model_outputs(self, *, key: str, new_data: Any, at_indices: Any = None,
                                neg_index_as_lookback: bool = False) -> None:
        column = self.extra_model_outputs.get(key)
        if column is None:
            raise KeyError(f"extra model output {key!r}: the episode has "
                           f"{sorted(self.extra_model_outputs) or 'none'}")
        self._set(column, f"extra_model_outputs[{key!r}]", new_data, at_indices,
                  neg_index_as_lookback)

    # --- index rules --------------------------------------------------------------------
    def _visible(self, data: Any) -> Any:
        return data[self._lookback:]

    def _position(self, data: Any, i: int, lookback_neg: bool) -> int:
        """The position in ``data`` (lookback included) of index ``i``; may be outside."""
        if i >= 0:
            return self._lookback + i
        return self._lookback + i if lookback_neg else len(data) + i

    def _no_data(self, what: str) -> Exception:
        """The error for data this episode does not keep (the callbacks' Episode without
        step history keeps none)."""
        return TypeError(f"{what}: this episode holds no such data")

    def _get(self, data: Any, indices: Any, lookback_neg: bool, fill: Any) -> Any:
        try:
            n = len(data)
        except TypeError:  # None: data not kept (no cost when it is)
            raise self._no_data("get") from None
        if type(indices) is int and fill is None and not lookback_neg:
            # The connectors' and callbacks' usual get_*(-1), once per step: the plain case.
            pos = self._lookback + indices if indices >= 0 else n + indices
            if self._lookback <= pos < n:
                return data[pos]
        if indices is None:
            return data[self._lookback:]
        if isinstance(indices, (int, np.integer)):
            pos = self._position(data, int(indices), lookback_neg)
            lo = 0 if lookback_neg or fill is not None else self._lookback
            if lo <= pos < n:
                return data[pos]
            if fill is not None:
                return self._fill_like(data, fill)
            raise IndexError(f"index {int(indices)} is outside the episode's "
                             f"{n - self._lookback} entries (lookback {self._lookback})")
        if isinstance(indices, slice):
            return self._get_slice(data, indices, lookback_neg, fill)
        if isinstance(indices, Iterable):
            out = [self._get(data, int(i), lookback_neg, fill) for i in indices]
            return _stack(out) if self.is_numpy else out
        raise TypeError(f"indices: {indices!r} is not None, an int, a slice or a list of ints")

    def _get_slice(self, data: Any, s: slice, lookback_neg: bool, fill: Any) -> Any:
        step = s.step or 1
        if fill is None and not lookback_neg:
            return data[self._lookback:][s]
        visible = len(data) - self._lookback
        if step < 0:  # rare: resolve over the visible range as Python does
            return data[self._lookback:][s]
        start = 0 if s.start is None else s.start
        stop = visible if s.stop is None else s.stop
        # Negative bounds count from the end, or into the lookback buffer if asked.
        a = self._lookback + start if start >= 0 or lookback_neg else len(data) + start
        b = self._lookback + stop if stop >= 0 or lookback_neg else len(data) + stop
        if fill is None:
            a, b = max(a, 0), min(b, len(data))
            return data[a:b:step] if a < b else data[0:0]
        if 0 <= a < b <= len(data):  # nothing to fill in (FrameStacking's usual case)
            return data[a:b:step]
        out = [data[p] if 0 <= p < len(data) else self._fill_like(data, fill)
               for p in range(a, b, step)]
        return _stack(out) if self.is_numpy else out

    def _fill_like(self, data: Any, fill: Any) -> Any:
        if fill is _PADDED:  # one_hot_discrete's marker (_get_one_hot)
            return fill
        if len(data):
            sample = data[0]
            if isinstance(sample, np.ndarray):
                return np.full_like(sample, fill)
            if isinstance(sample, dict):
                return {}
        return fill

    def _set(self, data: Any, what: str, new_data: Any, at_indices: Any,
             lookback_neg: bool) -> None:
        try:
            n = len(data)
        except TypeError:
            raise self._no_data(f"set_{what}") from None
        if type(at_indices) is int:  # set_*(at_indices=-1), once per step: the plain case
            pos = self._position(data, at_indices, lookback_neg)
            if not 0 <= pos < n:
                raise IndexError(f"set_{what}: index {at_indices} is outside the episode's "
                                 f"{n} entries")
            data[pos] = new_data
            return
        if at_indices is None:
            positions = list(range(self._lookback, n))
            values = list(new_data)
        elif isinstance(at_indices, (int, np.integer)):
            positions, values = [self._position(data, int(at_indices), lookback_neg)], [new_data]
        elif isinstance(at_indices, slice):
            positions = list(range(n))[self._lookback:][at_indices]
            values = list(new_data)
        else:
            positions = [self._position(data, int(i), lookback_neg) for i in at_indices]
            values = list(new_data)
        if len(values) != len(positions):
            raise ValueError(f"set_{what}: {len(values)} new values for {len(positions)} "
                             "indices")
        for pos, value in zip(positions, values):
            if not 0 <= pos < n:
                raise IndexError(f"set_{what}: index outside the episode's {n} entries")
            data[pos] = value

    def __repr__(self) -> str:
        return (f"SingleAgentEpisode(id_={self.id_!r}, len={len(self)}, "
                f"return={self.get_return():.3g}, done={self.is_done})")


def _stack(items: list) -> Any:
    if isinstance(items, np.ndarray):
        return items
    if not len(items):
        return np.zeros(0, np.float32)
    try:
        return np.stack([np.asarray(x) for x in items])
    except (ValueError, TypeError):
        return items
