"""Episodes reported by external simulators, cut into chunks the learner can use.

Shared by the policy server (remote inference: it records what it computed) and the
policy client (local inference: it records, then ships chunks). Only numpy: a simulator
that embeds the client does not load torch or gymnasium for this.

A step becomes complete when the next observation of its episode arrives (the next
``act``) or the episode ends; its reward is what ``reward`` added meanwhile. Complete
steps are cut into chunks of at most ``chunk_len`` steps; a chunk's ``next_obs`` is the
observation after its last step, so a chunk cut mid-episode bootstraps from it.

A recurrent policy's state lives with its episode (``step_inputs``, ``act``): started from
the initial state, advanced by each action, gone when the episode closes, so interleaved
episodes never share it. Each step records the state it read and the one it left
(``state_in_i``, ``state_out_i``, and ``prev_actions``/``prev_rewards`` when the policy
reads them), the columns an env runner's fragments carry for the learner's sequences.
"""

from __future__ import annotations

import itertools
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: The columns each recorded step holds, in the order of ``_Episode.steps``' tuples (the
#: names of ``rlmesh.rl.columns``, spelled here: this module must not import gymnasium).
STEP_COLUMNS = ("obs", "actions", "action_logp", "action_dist_inputs", "rewards")
FLOAT32_MAX = float(np.finfo(np.float32).max)


class ClientDataError(ValueError):
    """A value from a client that the server refuses; ``field`` names it."""

    def __init__(self, field: str, msg: str) -> None:
        super().__init__(f"{field}: {msg}")
        self.field = field


@dataclass
class _Episode:
    episode_id: str
    training_enabled: bool
    last_seen: float
    client: str = ""
    # Complete steps: STEP_COLUMNS' values, then the recurrent columns (a dict, or None).
    steps: list[tuple[Any, Any, float, Any, float, Any]] = field(default_factory=list)
    current: list[Any] | None = None  # [obs, action, logp, dist_inputs, reward so far, memory]
    state: list[Any] = field(default_factory=list)  # a recurrent policy's, for the next action
    total_reward: float = 0.0
    length: int = 0  # complete steps so far, over every chunk


class Episodes:
    """Open episodes by id and the chunks cut from them (``take_chunks``).

    At most ``max_open`` episodes are open, ``max_open_per_client`` of one client; starting
    one more closes the least recently used one (of that client, then of all), so a flood
    of episodes never locks other clients out. An episode may have ``max_steps`` steps.

    A recurrent policy's episodes start from ``initial_state`` (one array per state tensor);
    ``prev_action`` (the zero action, or None) and ``prev_reward`` say whether the policy
    reads the previous action and reward.

    ``max_step_reward``: the most ``|reward|`` one step may add up to (a server's
    ``policy_server_max_abs_reward``): rewards of one step are summed, and 1,000
    ``reward`` calls of 1e6 each on one step made an episode of one step return 1e9.
    """

    def __init__(self, chunk_len: int, max_open: int = 10_000,
                 max_open_per_client: int | None = None, max_steps: int | None = None,
                 initial_state: list[Any] | tuple = (), prev_action: Any = None,
                 prev_reward: bool = False, max_step_reward: float | None = None) -> None:
        if chunk_len < 1:
            raise ValueError(f"chunk_len must be at least 1, got {chunk_len}")
        self.chunk_len = chunk_len
        self.initial_state = [np.asarray(s) for s in initial_state]
        self.prev_action = None if prev_action is None else np.asarray(prev_action)
        self.prev_reward = bool(prev_reward)
        self.max_open = max_open
        self.max_open_per_client = max_open_per_client
        self.max_steps = max_steps
        self.max_step_reward = max_step_reward
        self.open: dict[str, _Episode] = {}  # least recently used first
        self.by_client: dict[str, dict[str, None]] = {}  # likewise, per client
        self.chunks: list[dict[str, Any]] = []
        self.counters = {"episodes_started": 0, "episodes_ended": 0, "episodes_expired": 0,
                         "episodes_evicted": 0, "steps_complete": 0, "steps_discarded": 0}
        self._ids = itertools.count()
        self._prefix = f"{os.getpid():x}-{time.monotonic_ns():x}-"

    def start(self, episode_id: str | None = None, training_enabled: bool = True,
              client: str = "") -> str:
        if episode_id is None:
            episode_id = self._prefix + str(next(self._ids))
        if not isinstance(episode_id, str) or not episode_id or len(episode_id) > 256:
            raise ClientDataError("episode_id", f"must be a non-empty string of at most 256 "
                                                f"characters, got {episode_id!r:.80}")
        if episode_id in self.open:
            raise ClientDataError("episode_id", f"episode {episode_id!r} is already open")
        mine = self.by_client.get(client, {})
        if self.max_open_per_client is not None and len(mine) >= self.max_open_per_client:
            self._evict(self.open[next(iter(mine))])
        if len(self.open) >= self.max_open:
            self._evict(next(iter(self.open.values())))
        self.open[episode_id] = _Episode(episode_id, bool(training_enabled), time.monotonic(),
                                         client, state=list(self.initial_state))
        self.by_client.setdefault(client, {})[episode_id] = None
        self.counters["episodes_started"] += 1
        return episode_id

    def get(self, episode_id: Any) -> _Episode:
        episode = self.open.pop(episode_id, None) if isinstance(episode_id, str) else None
        if episode is None:
            raise KeyError(f"unknown episode id {episode_id!r:.80}: never started, already "
                           f"ended, or closed after its client went silent or opened too many")
        self.open[episode_id] = episode  # now the most recently used
        mine = self.by_client[episode.client]
        del mine[episode_id]
        mine[episode_id] = None
        episode.last_seen = time.monotonic()
        return episode

    def _forget(self, episode: _Episode) -> None:
        del self.open[episode.episode_id]
        mine = self.by_client[episode.client]
        del mine[episode.episode_id]
        if not mine:  # one entry per client with open episodes, not per client ever seen
            del self.by_client[episode.client]

    def _evict(self, episode: _Episode) -> None:
        self.counters["episodes_evicted"] += 1
        self._close_unfinished(episode)

    def step_inputs(self, episode_id: Any) -> dict[str, np.ndarray]:
        """What a recurrent policy reads besides the observation for the episode's next
        action, one step's worth each: ``state_in_i`` and, if the policy reads them,
        ``prev_actions`` and ``prev_rewards`` (zeros at the episode's start). Empty for a
        stateless policy. Unknown ids fail here, before any work."""
        episode = self.get(episode_id)
        if not self.initial_state:
            return {}
        inputs = {f"state_in_{i}": s for i, s in enumerate(episode.state)}
        if self.prev_action is not None:
            inputs["prev_actions"] = (self.prev_action if episode.current is None
                                      else np.asarray(episode.current[1], self.prev_action.dtype))
        if self.prev_reward:
            inputs["prev_rewards"] = np.float32(0.0 if episode.current is None
                                                else episode.current[4])
        return inputs

    def act(self, episode_id: str, obs: Any, action: Any, logp: float, dist_inputs: Any,
            inputs: dict[str, Any] | None = None, state_out: list[Any] | tuple = ()) -> None:
        """A new step from ``obs``; the step before it (if any) is complete now. A recurrent
        policy's step also gives what it read (``step_inputs``) and the state it left,
        which the episode's next action reads."""
        episode = self.get(episode_id)
        if self.max_steps is not None and episode.length + (episode.current is not None) >= self.max_steps:
            raise ClientDataError("episode_id", f"episode {episode_id!r} has {self.max_steps} "
                                                f"steps, the most an episode may have here "
                                                f"(policy_server_max_episode_steps); end it")
        memory = None
        if self.initial_state:
            memory = {**(inputs or {}), **{f"state_out_{i}": s for i, s in enumerate(state_out)}}
            episode.state = list(state_out)
        self._complete_current(episode)
        episode.current = [obs, action, float(logp), dist_inputs, 0.0, memory]
        if len(episode.steps) >= self.chunk_len:
            self._cut(episode, next_obs=obs, terminated=False, truncated=False)

    def reward(self, episode_id: str, reward: float) -> None:
        episode = self.get(episode_id)
        if episode.current is None:
            raise ValueError(f"episode {episode_id!r}: log_returns before any action; a reward "
                             f"belongs to the step an action started")
        step_reward = episode.current[4] + reward
        if self.max_step_reward is not None and abs(step_reward) > self.max_step_reward:
            raise ClientDataError("reward", f"the rewards logged for one step sum to "
                                            f"{step_reward:g}, beyond the server's limit of "
                                            f"+-{self.max_step_reward:g} a step "
                                            f"(policy_server_max_abs_reward)")
        episode.current[4] = step_reward
        episode.total_reward += reward

    def end(self, episode_id: str, obs: Any, truncated: bool = False) -> dict[str, Any]:
        """Close the episode: its last step is complete, ``obs`` its final observation.
        ``truncated``: stopped from outside (a time limit), so values bootstrap from ``obs``."""
        episode = self.get(episode_id)
        self._complete_current(episode)
        self._forget(episode)
        self.counters["episodes_ended"] += 1
        self._cut(episode, next_obs=obs, terminated=not truncated, truncated=bool(truncated),
                  final=True)
        return self.summary(episode)

    def expire(self, timeout_s: float, now: float | None = None) -> list[str]:
        """Close the episodes no call has touched for ``timeout_s`` (``_close_unfinished``)."""
        now = time.monotonic() if now is None else now
        gone = []
        for episode in self.open.values():  # least recently used first
            if now - episode.last_seen <= timeout_s:
                break
            gone.append(episode)
        for episode in gone:
            self.counters["episodes_expired"] += 1
            self._close_unfinished(episode)
        return [e.episode_id for e in gone]

    def _close_unfinished(self, episode: _Episode) -> None:
        """Close an episode its client never ended: its complete steps are kept as a
        truncated chunk (bootstrapped from the observation after them); the step in
        progress, whose outcome never came, is dropped. No end is reported: an episode
        cut short is no sample of the return, and 10,000 empty ones dragged the mean to 0."""
        self._forget(episode)
        if episode.current is not None:
            self.counters["steps_discarded"] += 1
            self._cut(episode, next_obs=episode.current[0], terminated=False, truncated=True)
        else:
            self._cut(episode, next_obs=None, terminated=False, truncated=True)

    def cut_open(self) -> None:
        """Chunk the complete steps of every open episode now (before a train batch)."""
        for episode in self.open.values():
            if episode.steps and episode.current is not None:
                self._cut(episode, next_obs=episode.current[0], terminated=False, truncated=False)

    def take_chunks(self) -> list[dict[str, Any]]:
        chunks, self.chunks = self.chunks, []
        return chunks

    def steps_ready(self) -> int:
        return sum(len(c["rewards"]) for c in self.chunks)

    @staticmethod
    def summary(episode: _Episode) -> dict[str, Any]:
        return {"return": float(episode.total_reward), "length": int(episode.length),
                "custom_metrics": {}, "episode_id": episode.episode_id, "client": episode.client}

    def _complete_current(self, episode: _Episode) -> None:
        if episode.current is None:
            return
        episode.steps.append(tuple(episode.current))
        episode.current = None
        episode.length += 1
        self.counters["steps_complete"] += 1

    def _cut(self, episode: _Episode, next_obs: Any, terminated: bool, truncated: bool,
             final: bool = False) -> None:
        steps, episode.steps = episode.steps, []
        if not episode.training_enabled:
            return
        if not steps:
            if final:
                # An episode whose steps all went out in earlier chunks still reports its
                # end (return, length) with an empty chunk.
                self.chunks.append(_empty_end(episode.episode_id, self.summary(episode)))
            return
        if next_obs is None:  # expired with no observation after its last complete step
            steps, next_obs = steps[:-1], steps[-1][0]
            self.counters["steps_discarded"] += 1
            if not steps:
                return
        columns = list(zip(*steps))
        chunk = {name: np.asarray(col) for name, col in zip(STEP_COLUMNS, columns)}
        chunk["action_logp"] = chunk["action_logp"].astype(np.float32)
        chunk["rewards"] = chunk["rewards"].astype(np.float32)
        memory = columns[len(STEP_COLUMNS)]
        if memory[0] is not None:  # a recurrent policy's: state_in/out, prev action/reward
            chunk.update({k: np.stack([np.asarray(m[k]) for m in memory]) for k in memory[0]})
        chunk["next_obs"] = np.asarray(next_obs)
        chunk["terminated"], chunk["truncated"] = terminated, truncated
        # Every chunk names its episode: a server adds up the rewards of an episode's
        # chunks itself and never takes the end's return on the client's word.
        chunk["episode_id"] = episode.episode_id
        chunk["episode"] = self.summary(episode) if final else None
        self.chunks.append(chunk)


def fragment_from_chunks(chunks: list[dict[str, Any]], specs: dict[str, Any]) -> dict[str, Any]:
    """Chunks side by side as one time-major fragment ``[T, B]`` in the env runner's layout
    (``roles.env_runner.FragmentBuffer``): chunk b fills rows 0..L-1 of column b; rows after
    are padding (mask False, terminated, as ``merge_fragments`` pads). A chunk that did not
    end in a termination is a truncation at its last row, bootstrapped from its next_obs.
    Empty chunks only carry an episode's end into ``episodes``. ``specs``: each step
    column's ``ColumnSpec`` (``STEP_COLUMNS`` and a recurrent policy's columns, from
    ``rl/columns.py``)."""
    full = [c for c in chunks if len(c["rewards"])]
    episodes = [c["episode"] for c in chunks if c.get("episode") is not None]
    obs_shape, obs_dtype = specs["obs"].shape, specs["obs"].dtype
    T, B = max((len(c["rewards"]) for c in full), default=0), len(full)
    layout = {k: (spec.shape, spec.dtype) for k, spec in specs.items()}
    layout.update(terminateds=((), bool), truncateds=((), bool), mask=((), bool))
    out: dict[str, Any] = {k: np.zeros((T, B, *shape), dtype) for k, (shape, dtype) in layout.items()}
    out["next_obs"] = np.zeros((B, *obs_shape), obs_dtype)
    trunc_index, trunc_obs = [], []
    for b, chunk in enumerate(full):
        n = len(chunk["rewards"])
        for k in specs:
            out[k][:n, b] = np.asarray(chunk[k]).reshape(n, *out[k].shape[2:])
        out["mask"][:n, b] = True
        out["terminateds"][n:, b] = True
        if chunk["terminated"]:
            out["terminateds"][n - 1, b] = True
        else:
            out["truncateds"][n - 1, b] = True
            if n < T:
                trunc_index.append((n - 1, b))
                trunc_obs.append(chunk["next_obs"])
        if n == T:
            out["next_obs"][b] = np.asarray(chunk["next_obs"]).reshape(obs_shape)
    out["trunc_index"] = np.array(trunc_index, np.int64).reshape(-1, 2)
    out["trunc_obs"] = (np.stack(trunc_obs).astype(obs_dtype).reshape(-1, *obs_shape) if trunc_obs
                        else np.zeros((0, *obs_shape), obs_dtype))
    out["env_steps"] = int(out["mask"].sum())
    out["episodes"] = episodes
    return out


def as_batch(inputs: dict[str, Any]) -> tuple[Any, Any, Any]:
    """``step_inputs`` as a policy's state, prev action and prev reward batches of one."""
    if not inputs:
        return None, None, None
    states = [np.asarray(inputs[f"state_in_{i}"])[None]
              for i in range(sum(k.startswith("state_in_") for k in inputs))]
    prev = [None if k not in inputs else np.asarray(inputs[k])[None]
            for k in ("prev_actions", "prev_rewards")]
    return states, prev[0], prev[1]


def _empty_end(episode_id: str, summary: dict[str, Any]) -> dict[str, Any]:
    return {"rewards": np.zeros(0, np.float32), "episode_id": episode_id, "episode": summary}


def check_reward(reward: Any) -> float:
    """A reward as a float, or a clear error (NaN and infinities included, and values that
    are infinite as the float32 the learner trains on)."""
    if isinstance(reward, bool) or not isinstance(reward, (int, float, np.integer, np.floating)):
        raise ClientDataError("reward", f"must be a number, got {type(reward).__name__} "
                                        f"{reward!r:.40}")
    value = float(reward)
    if not math.isfinite(value) or abs(value) > FLOAT32_MAX:
        raise ClientDataError("reward", f"must be finite as float32, got {value}")
    return value
