"""The offline record: a runner's time-major fragment as flat per-step chunks of episodes
(RLlib's SampleBatch columns plus eps_id, t, agent_index, policy_id), and the way back:
chunks joined into episodes by eps_id, episodes laid side by side as a time-major batch."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from rlmesh.rl.columns import DEFAULT_POLICY_ID, Columns, time_major_keys

NEW_OBS = "new_obs"  # RLlib's name of the observation after each step
ACTION_PROB = "action_prob"  # RLlib's estimators read it: exp(action_logp)
POLICY_ID, AGENT_ID, UNROLL_ID = "policy_id", "agent_id", "unroll_id"
SINGLE_AGENT_ID = "agent0"  # RLlib's agent id of a single-agent env
#: Per-step columns that only label a step; the learner's batch leaves them out.
LABELS = frozenset({Columns.EPS_ID, Columns.T, Columns.AGENT_INDEX, NEW_OBS, ACTION_PROB,
                    POLICY_ID, AGENT_ID, UNROLL_ID, Columns.INFOS, "dones"})


class FragmentRecorder:
    """Cuts one runner's fragments into per-episode chunks, keeping each env's episode id and
    step counter across fragments (an episode cut by truncate_episodes keeps its id)."""

    def __init__(self, policy_id: str = DEFAULT_POLICY_ID) -> None:
        self.policy_id = policy_id
        self._ids: list[int] = []
        self._t: list[int] = []
        self._unroll = 0

    def _new_id(self) -> int:
        # Random 63-bit ids, as RLlib's: files of several runs in one directory never clash.
        return int.from_bytes(os.urandom(8), "little") >> 1

    def records(self, fragment: dict[str, Any]) -> list[dict[str, np.ndarray]]:
        mask = np.asarray(fragment[Columns.MASK], bool)
        steps, width = mask.shape
        while len(self._ids) < width:
            self._ids.append(self._new_id())
            self._t.append(0)
        done = np.asarray(fragment[Columns.TERMINATEDS], bool) | np.asarray(
            fragment[Columns.TRUNCATEDS], bool)
        trunc = {(int(t), int(b)): i for i, (t, b) in
                 enumerate(np.asarray(fragment["trunc_index"]).reshape(-1, 2))}
        keys = [k for k in time_major_keys(fragment) if k != Columns.MASK and k not in LABELS]
        out = []
        for b in range(width):
            rows = np.flatnonzero(mask[:, b])
            # A chunk ends at an episode's end or where the rows stop being consecutive (an
            # episode discarded after an env error left masked rows between).
            cuts = [i + 1 for i, t in enumerate(rows)
                    if done[t, b] or (i + 1 < len(rows) and rows[i + 1] != t + 1)]
            for lo, hi in zip([0, *cuts], [*cuts, len(rows)]):
                if hi > lo:
                    out.append(self._chunk(fragment, keys, rows[lo:hi], b, done, trunc))
        self._unroll += 1
        return out

    def _chunk(self, fragment: dict[str, Any], keys: list[str], index: np.ndarray, b: int,
               done: np.ndarray, trunc: dict) -> dict[str, np.ndarray]:
        n, last = len(index), int(index[-1])
        if index[0] > 0 and not np.asarray(fragment[Columns.MASK])[index[0] - 1, b]:
            self._ids[b], self._t[b] = self._new_id(), 0  # after a gap: a new episode
        rec = {k: np.asarray(fragment[k])[index, b] for k in keys}
        obs = np.asarray(fragment[Columns.OBS])
        new_obs = np.zeros_like(rec[Columns.OBS])
        new_obs[:-1] = obs[index[1:], b]
        if (last, b) in trunc:
            new_obs[-1] = np.asarray(fragment["trunc_obs"])[trunc[(last, b)]]
        elif last == len(obs) - 1:
            new_obs[-1] = np.asarray(fragment["next_obs"])[b]
        # else: a terminal step inside the fragment, whose final observation the runner
        # does not keep (nothing bootstraps from it): left as zeros.
        rec[NEW_OBS] = new_obs
        rec[Columns.EPS_ID] = np.full(n, self._ids[b], np.int64)
        rec[Columns.T] = np.arange(self._t[b], self._t[b] + n, dtype=np.int64)
        rec[Columns.AGENT_INDEX] = np.zeros(n, np.int64)
        rec[UNROLL_ID] = np.full(n, self._unroll, np.int64)
        rec[POLICY_ID] = np.array([self.policy_id] * n)
        rec[AGENT_ID] = np.array([SINGLE_AGENT_ID] * n)
        if Columns.ACTION_LOGP in rec:
            rec[ACTION_PROB] = np.exp(rec[Columns.ACTION_LOGP]).astype(np.float32)
        if done[last, b]:
            self._ids[b], self._t[b] = self._new_id(), 0
        else:
            self._t[b] += n
        return rec


MAX_EPISODES_KEPT = 10_000  # episode ids a multi-agent recorder remembers


class MultiAgentRecorder:
    """Cuts a multi-agent runner's fragments (``policy_batches``, each column one agent's
    piece, right-aligned) into per-agent chunks, ``{policy_id: [chunk]}``: every step with
    its episode's random id (shared by its agents), the agent's id (as a string) and index
    (order of first appearance in the episode), and its step counter across fragments."""

    def __init__(self) -> None:
        self._ids: dict[int, int] = {}  # the sampler's episode id -> random 63-bit id
        self._agents: dict[int, dict[str, int]] = {}  # episode -> agent id -> agent_index
        self._t: dict[tuple[int, str], int] = {}  # (episode, agent) -> steps written
        self._unroll = 0

    def records(self, fragment: dict[str, Any], owners: dict[str, list[tuple[int, Any]]]
                ) -> dict[str, list[dict[str, np.ndarray]]]:
        out = {}
        for pid, part in fragment["policy_batches"].items():
            mask = np.asarray(part[Columns.MASK], bool)
            keys = [k for k in time_major_keys(part) if k != Columns.MASK and k not in LABELS]
            out[pid] = [self._chunk(part, keys, np.flatnonzero(mask[:, b]), b, pid, owner)
                        for b, owner in enumerate(owners[pid]) if mask[:, b].any()]
        self._unroll += 1
        # The sampler does not say when an episode is over (an agent may join late): the
        # ids of the oldest episodes are forgotten, far more than a runner's envs ago.
        while len(self._ids) > MAX_EPISODES_KEPT:
            gone = next(iter(self._ids))
            del self._ids[gone]
            self._agents.pop(gone, None)
            for key in [k for k in self._t if k[0] == gone]:
                del self._t[key]
        return out

    def _chunk(self, part: dict[str, Any], keys: list[str], index: np.ndarray, b: int,
               pid: str, owner: tuple[int, Any]) -> dict[str, np.ndarray]:
        episode, aid = owner[0], str(owner[1])
        n = len(index)
        rec = {k: np.asarray(part[k])[index, b] for k in keys}
        obs = np.asarray(part[Columns.OBS])
        new_obs = np.empty_like(rec[Columns.OBS])
        new_obs[:-1] = obs[index[1:], b]
        new_obs[-1] = np.asarray(part["next_obs"])[b]  # each column ends at the cut
        rec[NEW_OBS] = new_obs
        eps_id = self._ids.setdefault(episode, _random_id())
        agents = self._agents.setdefault(episode, {})
        index_of = agents.setdefault(aid, len(agents))
        t0 = self._t.get((episode, aid), 0)
        rec[Columns.EPS_ID] = np.full(n, eps_id, np.int64)
        rec[Columns.T] = np.arange(t0, t0 + n, dtype=np.int64)
        rec[Columns.AGENT_INDEX] = np.full(n, index_of, np.int64)
        rec[UNROLL_ID] = np.full(n, self._unroll, np.int64)
        rec[POLICY_ID] = np.array([pid] * n)
        rec[AGENT_ID] = np.array([aid] * n)
        if Columns.ACTION_LOGP in rec:
            rec[ACTION_PROB] = np.exp(rec[Columns.ACTION_LOGP]).astype(np.float32)
        if rec[Columns.TERMINATEDS][-1] or rec[Columns.TRUNCATEDS][-1]:  # the agent left
            self._t.pop((episode, aid), None)
        else:
            self._t[(episode, aid)] = t0 + n
        return rec


def _random_id() -> int:
    # Random 63-bit ids, as RLlib's: files of several runs in one directory never clash.
    return int.from_bytes(os.urandom(8), "little") >> 1


def episode_record(obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
                   terminated: np.ndarray, truncated: np.ndarray, new_obs: np.ndarray,
                   extra: dict[str, np.ndarray] | None = None,
                   policy_id: str = DEFAULT_POLICY_ID) -> dict[str, np.ndarray]:
    """One episode as an offline record with a fresh eps_id; ``extra``: per-step columns of
    the policy's outputs (action_logp, action_dist_inputs, ...) written beside."""
    n = len(rewards)
    rec = {Columns.OBS: np.asarray(obs), Columns.ACTIONS: np.asarray(actions),
           Columns.REWARDS: np.asarray(rewards, np.float32),
           Columns.TERMINATEDS: np.asarray(terminated, bool),
           Columns.TRUNCATEDS: np.asarray(truncated, bool), NEW_OBS: np.asarray(new_obs),
           **{k: np.asarray(v) for k, v in (extra or {}).items()},
           Columns.EPS_ID: np.full(n, int.from_bytes(os.urandom(8), "little") >> 1, np.int64),
           Columns.T: np.arange(n, dtype=np.int64), Columns.AGENT_INDEX: np.zeros(n, np.int64),
           POLICY_ID: np.array([policy_id] * n)}
    if Columns.ACTION_LOGP in rec:
        rec[ACTION_PROB] = np.exp(rec[Columns.ACTION_LOGP]).astype(np.float32)
    return rec


def join_episodes(records: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """Chunks grouped by eps_id and agent_id (a record may hold several episodes: a Parquet
    file; a multi-agent episode is one trajectory per agent) and joined in the order of t
    where their steps follow on (``_consecutive``); columns not in every chunk of an
    episode are dropped."""
    chunks: dict[tuple[int, str], list[dict[str, np.ndarray]]] = {}
    for rec in records:
        ids = rec[Columns.EPS_ID]
        # Multi-agent data: each agent of an episode is a trajectory of its own.
        agents = rec[AGENT_ID].astype(str) if AGENT_ID in rec else np.full(len(ids), "")
        change = (ids[1:] != ids[:-1]) | (agents[1:] != agents[:-1])
        starts = np.flatnonzero(np.r_[True, change])
        for lo, hi in zip(starts, [*starts[1:], len(ids)]):
            key = (int(ids[lo]), str(agents[lo]))
            chunks.setdefault(key, []).append({k: v[lo:hi] for k, v in rec.items()})
    episodes = []
    for parts in chunks.values():
        parts.sort(key=lambda p: int(p[Columns.T][0]) if Columns.T in p else 0)
        for run in _consecutive(parts):
            keys = set.intersection(*(set(p) for p in run))
            episodes.append({k: np.concatenate([p[k] for p in run]) for k in run[0] if k in keys})
    return episodes


def _consecutive(parts: list[dict[str, np.ndarray]]) -> list[list[dict[str, np.ndarray]]]:
    """One episode's chunks (in the order of t) cut where steps are missing (a record that
    could not be read): each run of consecutive steps becomes an episode, the earlier ones
    ending cut short (trained on as truncated), so no transition joins two distant steps."""
    runs = [[parts[0]]]
    for part in parts[1:]:
        last = runs[-1][-1]
        if (Columns.T in part and Columns.T in last
                and int(part[Columns.T][0]) != int(last[Columns.T][-1]) + 1):
            runs.append([part])
        else:
            runs[-1].append(part)
    return runs


def batch_from_episodes(episodes: list[dict[str, np.ndarray]], keys: list[str]
                        ) -> dict[str, np.ndarray]:
    """Episodes side by side as a time-major batch ``[T, B]`` as runners ship them: padding
    masked (and marked terminated, as merge_fragments pads), ``next_obs`` after each column's
    last row, truncations with their final observations. An episode the data does not end
    is cut as a truncation, bootstrapping from its last new_obs."""
    steps, width = max(len(e[Columns.REWARDS]) for e in episodes), len(episodes)
    batch = {}
    for k in keys:
        first = np.asarray(episodes[0][k])
        col = np.zeros((steps, width, *first.shape[1:]), first.dtype)
        for b, e in enumerate(episodes):
            col[:len(e[k]), b] = e[k]
        batch[k] = col
    mask = np.zeros((steps, width), bool)
    trunc_index, trunc_obs, next_obs = [], [], []
    for b, e in enumerate(episodes):
        n = len(e[Columns.REWARDS])
        mask[:n, b] = True
        batch[Columns.TERMINATEDS][n:, b] = True
        if not (e[Columns.TERMINATEDS][-1] or e[Columns.TRUNCATEDS][-1]):
            batch[Columns.TRUNCATEDS][n - 1, b] = True
        final = e[NEW_OBS][-1] if NEW_OBS in e else e[Columns.OBS][-1]
        next_obs.append(final)
        if n < steps and batch[Columns.TRUNCATEDS][n - 1, b] and not batch[Columns.TERMINATEDS][n - 1, b]:
            trunc_index.append((n - 1, b))
            trunc_obs.append(final)
    obs = batch[Columns.OBS]
    batch[Columns.MASK] = mask
    batch["next_obs"] = np.asarray(np.stack(next_obs), obs.dtype)
    batch["trunc_index"] = np.array(trunc_index, np.int64).reshape(-1, 2)
    batch["trunc_obs"] = (np.asarray(np.stack(trunc_obs), obs.dtype) if trunc_obs
                          else np.zeros((0, *obs.shape[2:]), obs.dtype))
    return batch
