"""What a learner trains on, from what a caller hands it (RLlib's ``update_from_batch`` /
``update_from_episodes``): batches by policy id, a single-agent batch, a MultiAgentBatch-like
object, env runners' fragments, finished episodes; and episodes cut for data-parallel ranks."""

from __future__ import annotations

from typing import Any, Collection, Mapping

import numpy as np

from rlmesh.offline.records import NEW_OBS, POLICY_ID, batch_from_episodes
from rlmesh.rl.columns import DEFAULT_POLICY_ID, Columns, merge_by_policy, shard_batch

#: Columns every finished episode must have to become a train batch.
EPISODE_COLUMNS = (Columns.OBS, Columns.ACTIONS, Columns.REWARDS, Columns.TERMINATEDS,
                   Columns.TRUNCATEDS)


def policy_batches(batch: Any, known: Collection[str], removed: Collection[str] = ()
                   ) -> dict[str, Any]:
    """``batch`` as ``{policy_id: batch}``: a dict of such (as algorithms pass), an object
    with ``policy_batches`` (RLlib's MultiAgentBatch), or one policy's columns (a dict or a
    ``SampleBatch``: the single-agent ``default_policy``; flat samples laid out time-major).
    A policy id not in ``known`` (nor ``removed`` while training) is refused in one line."""
    batches = getattr(batch, "policy_batches", None)
    if batches is None and isinstance(batch, Mapping) and "policy_batches" in batch:
        batches = batch["policy_batches"]  # a multi-agent runner's fragment
    if batches is None:
        if not isinstance(batch, Mapping):
            raise TypeError(f"update_from_batch: the batch is {type(batch).__name__}; pass "
                            "{policy_id: columns}, one policy's columns (a dict or SampleBatch), "
                            "or a MultiAgentBatch")
        nested = [isinstance(v, Mapping) for v in batch.values()]
        if nested and all(nested):
            batches = batch
        elif any(nested):
            raise ValueError("update_from_batch: the batch mixes columns and per-policy dicts "
                             f"({sorted(map(str, batch))}); pass {{policy_id: columns}} or one "
                             "policy's columns")
        else:
            batches = {DEFAULT_POLICY_ID: time_major(batch)}
    unknown = sorted(str(p) for p in batches if p not in known and p not in removed)
    if unknown:
        raise ValueError(f"update_from_batch: no policy {', '.join(map(repr, unknown))} on this "
                         f"learner (it has {sorted(known)}); key the batch by one of those "
                         "(a single-agent batch trains 'default_policy')")
    return dict(batches)


def time_major(batch: Mapping[str, Any]) -> Mapping[str, Any]:
    """One policy's columns as policies' ``update`` takes them: a time-major batch
    (``mask`` [T, B], as runners ship) passes; flat samples (1-D ``rewards``) become one
    column ``[N, 1]`` whose episodes follow each other, a change of ``eps_id`` without a done
    cut as a truncation, bootstrapping from ``new_obs`` (or ``next_obs``) where given."""
    rewards = batch.get(Columns.REWARDS)
    if rewards is None or np.ndim(rewards) != 1:
        return batch
    n = len(rewards)
    if Columns.MASK in batch:  # flat samples with a mask: its valid rows only
        keep = np.asarray(batch[Columns.MASK], bool)
        batch = {k: np.asarray(v)[keep] for k, v in batch.items()
                 if k != Columns.MASK and _numeric_rows(v, n)}
        n = int(keep.sum())
    done = {k: np.asarray(batch.get(k, np.zeros(n, bool)), bool)
            for k in (Columns.TERMINATEDS, Columns.TRUNCATEDS)}
    if Columns.EPS_ID in batch:
        eps = np.asarray(batch[Columns.EPS_ID])
        cut = np.r_[eps[1:] != eps[:-1], False] & ~done[Columns.TERMINATEDS]
        done[Columns.TRUNCATEDS] = done[Columns.TRUNCATEDS] | cut
    obs = _float32(np.asarray(batch[Columns.OBS]))
    after = batch.get(NEW_OBS, batch.get(Columns.NEXT_OBS))
    # Without the observation after each step, the nearest known one stands in for it.
    after = (_float32(np.asarray(after)) if after is not None and _numeric_rows(after, n)
             else obs[np.minimum(np.arange(n) + 1, n - 1)])
    out = {k: _float32(np.asarray(v))[:, None] for k, v in batch.items()
           if k not in (NEW_OBS, Columns.NEXT_OBS, *done) and _numeric_rows(v, n)}
    out.update({k: v[:, None] for k, v in done.items()})
    out[Columns.MASK] = np.ones((n, 1), bool)
    rows = np.flatnonzero(done[Columns.TRUNCATEDS] & ~done[Columns.TERMINATEDS])
    out["trunc_index"] = np.stack([rows, np.zeros_like(rows)], 1).astype(np.int64)
    out["trunc_obs"] = after[rows]
    out["next_obs"] = after[-1:]
    return out


def episode_batches(episodes: Any) -> dict[str, dict[str, np.ndarray]]:
    """``{policy_id: time-major batch}`` from a list of env runners' fragments (what
    ``synchronous_parallel_sample`` returns) or of finished episodes (``{column: per-step
    array}`` with obs, actions, rewards, terminateds, truncateds, and new_obs after each step;
    ``policy_id`` names its policy, default ``default_policy``)."""
    if isinstance(episodes, Mapping) or not isinstance(episodes, (list, tuple)) or not episodes:
        raise TypeError(f"update_from_episodes: episodes is {type(episodes).__name__}"
                        f"{'' if episodes else ' (empty)'}; pass a non-empty list of fragments "
                        "(synchronous_parallel_sample's) or of episodes ({column: array})")
    fragments = [e for e in episodes if _is_fragment(e)]
    if fragments and len(fragments) != len(episodes):
        raise ValueError("update_from_episodes: a list of fragments or a list of episodes, "
                         "not both")
    if fragments:
        return merge_by_policy(fragments)
    grouped: dict[str, list[dict[str, np.ndarray]]] = {}
    for i, e in enumerate(episodes):
        episode = _episode(e, i)
        pid = episode.pop(POLICY_ID, None)
        grouped.setdefault(DEFAULT_POLICY_ID if pid is None else str(pid[0]), []).append(episode)
    out = {}
    for pid, group in grouped.items():
        shared = set.intersection(*(set(e) for e in group)) - {NEW_OBS, Columns.MASK}
        keys = [*EPISODE_COLUMNS, *sorted(shared - set(EPISODE_COLUMNS))]
        out[pid] = batch_from_episodes(group, keys)
    return out


def checked_episodes(episodes: Any) -> list[dict[str, Any]]:
    """``episodes`` as a list of plain dicts (what crosses to a learner process), or the
    TypeError ``episode_batches`` would raise."""
    if isinstance(episodes, Mapping) or not isinstance(episodes, (list, tuple)) or not episodes:
        episode_batches(episodes)  # raises, naming what to pass
    return [dict(e) if isinstance(e, Mapping)
            else episode_columns(e) if hasattr(e, "extra_model_outputs") else e
            for e in episodes]


def _is_fragment(e: Any) -> bool:
    """A runner's fragment: time-major columns (a 2-D mask), or a multi-agent one."""
    return isinstance(e, Mapping) and ("policy_batches" in e or np.ndim(e.get(Columns.MASK)) == 2)


def episode_columns(e: Any) -> dict[str, Any]:
    """A SingleAgentEpisode (RLlib's, rlmesh.env.single_agent_episode) as ``{column:
    per-step array}``: its steps past the lookback, the observation before each
    (``obs``) and after it (``new_obs``), done flags on its last step, its extra model
    outputs (action_logp, vf_preds, ...) where every step has one, ``policy_id`` its
    ``module_id`` where set."""
    n, start = len(e), len(e.actions) - len(e)
    obs = np.asarray(e.observations[start:])
    out: dict[str, Any] = {Columns.OBS: obs[:n], NEW_OBS: obs[1:n + 1],
                           Columns.ACTIONS: np.asarray(e.actions[start:]),
                           Columns.REWARDS: np.asarray(e.rewards[start:], np.float32),
                           Columns.TERMINATEDS: np.zeros(n, bool),
                           Columns.TRUNCATEDS: np.zeros(n, bool)}
    if n:
        out[Columns.TERMINATEDS][-1] = e.is_terminated
        out[Columns.TRUNCATEDS][-1] = e.is_truncated
    for key, values in e.extra_model_outputs.items():
        values = values[start:]
        if len(values) == n and all(v is not None for v in values):
            out[key] = np.asarray(values)
    if e.module_id is not None:
        out[POLICY_ID] = [e.module_id] * n
    return out


def _episode(e: Any, i: int) -> dict[str, np.ndarray]:
    if hasattr(e, "get_observations") and hasattr(e, "extra_model_outputs"):
        e = episode_columns(e)  # RLlib's SingleAgentEpisode
    if not isinstance(e, Mapping):
        raise TypeError(f"update_from_episodes: episode {i} is {type(e).__name__}, not "
                        "a SingleAgentEpisode or {column: per-step array}")
    missing = [k for k in EPISODE_COLUMNS if k not in e]
    if missing:
        raise ValueError(f"update_from_episodes: episode {i} lacks {missing}; an episode has "
                         f"{list(EPISODE_COLUMNS)} and new_obs (the observation after each step)")
    n = len(e[Columns.REWARDS])
    out = {k: _float32(np.asarray(v)) for k, v in e.items() if _numeric_rows(v, n)}
    if NEW_OBS not in out and Columns.NEXT_OBS in out:
        out[NEW_OBS] = out.pop(Columns.NEXT_OBS)
    if POLICY_ID in e:
        out[POLICY_ID] = np.asarray(e[POLICY_ID]).reshape(-1)
    return out


def shard_episodes(batches: dict[str, dict[str, Any]], n: int) -> list[list[dict[str, Any]]]:
    """Each policy's batch cut along its envs for ``n`` data-parallel ranks: per rank, a list
    of fragments (one per policy) for its learner's ``update_from_episodes``."""
    shards = {pid: shard_batch(b, n) for pid, b in batches.items()}
    return [[{**s[r], "policy_id": pid} for pid, s in shards.items()] for r in range(n)]


def _numeric_rows(value: Any, n: int) -> bool:
    arr = value if isinstance(value, np.ndarray) else None
    if arr is None and isinstance(value, (list, tuple)):
        arr = np.asarray(value)
    return arr is not None and arr.ndim >= 1 and len(arr) == n and arr.dtype.kind in "biuf"


def _float32(arr: np.ndarray) -> np.ndarray:
    """Python floats read as float64; the models and the runners' columns are float32."""
    return arr.astype(np.float32) if arr.dtype == np.float64 else arr
