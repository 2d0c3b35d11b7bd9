"""The sample columns, declared once: their names, and the dtype and per-step shape of each,
derived from the spaces and from what a policy declares (its view requirements). The env
runner's fragment buffer, the policy server and client, ``merge_fragments``, replay and the
learners all iterate over these declarations; none writes the layout out itself.

A fragment is one policy's time-major columns ``[T, B, ...]`` plus a few fragment-level keys
(``FRAGMENT_KEYS``); every other key of a fragment is a time-major column.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

import gymnasium as gym
import numpy as np

#: The policy of a single-agent run; results, weights and checkpoints are keyed by policy id.
DEFAULT_POLICY_ID = "default_policy"


class Columns:
    """Column names, in RLlib's spelling."""

    OBS = "obs"
    ACTIONS = "actions"  # as sampled: unclipped for DiagGaussian
    REWARDS = "rewards"
    TERMINATEDS = "terminateds"
    TRUNCATEDS = "truncateds"
    MASK = "mask"  # False on padding: a row an env did not step
    ACTION_LOGP = "action_logp"  # log-prob under the policy that sampled the action
    ACTION_DIST_INPUTS = "action_dist_inputs"
    VF_PREDS = "vf_preds"  # V(s_t)
    EPS_ID = "eps_id"
    AGENT_INDEX = "agent_index"
    T = "t"  # the step's index in its episode
    PREV_ACTIONS = "prev_actions"
    PREV_REWARDS = "prev_rewards"
    INFOS = "infos"
    # What learners compute from a batch.
    NEXT_OBS = "next_obs"
    BOOTSTRAP_VALUES = "bootstrap_values"  # V(s_{t+1}) of the true next obs, see compute_gae
    ADVANTAGES = "advantages"
    VALUE_TARGETS = "value_targets"
    # RLlib's new-stack keys of a module's input batch and output dict (RLModule).
    ACTIONS_FOR_ENV = "actions_for_env"
    AGENT_ID = "agent_id"
    MODULE_ID = "module_id"
    ACTION_PROB = "action_prob"
    # A stateful module reads its state as batch[STATE_IN] (a dict of [B, ...] tensors)
    # and returns the next one as out[STATE_OUT].
    STATE_IN = "state_in"
    STATE_OUT = "state_out"
    EMBEDDINGS = "embeddings"  # the encoder's features; a value function may reuse them
    VALUES_BOOTSTRAPPED = "values_bootstrapped"
    INTRINSIC_REWARDS = "intrinsic_rewards"
    LOSS_MASK = "loss_mask"

    @staticmethod
    def state_in(i: int) -> str:
        return f"state_in_{i}"

    @staticmethod
    def state_out(i: int) -> str:
        return f"state_out_{i}"


@dataclass(frozen=True)
class ColumnSpec:
    """One column: the shape of one step's entry and its dtype (RLlib's ViewRequirement,
    reduced to what a buffer and a wire check need)."""

    shape: tuple[int, ...]
    dtype: np.dtype

    @staticmethod
    def of(value: Any) -> "ColumnSpec":
        """The spec of a batch of values ``[N, ...]`` (an extra action output)."""
        arr = np.asarray(value)
        return ColumnSpec(tuple(arr.shape[1:]), arr.dtype)


def space_layout(space: gym.Space) -> ColumnSpec:
    """How one observation or action of ``space`` is stored: int64 for Discrete and
    MultiDiscrete, int8 for MultiBinary, float32 for Box (uint8 Box observations, i.e.
    pixels, stay uint8); a Tuple or Dict as one uint8 record packing its leaves
    (``rl/nested_spaces.py``), so nested values travel as flat arrays."""
    from rlmesh.rl.nested_spaces import is_nested, leaf_layout, record_size

    if is_nested(space):
        return ColumnSpec((record_size(space),), np.dtype(np.uint8))
    try:
        shape, dtype = leaf_layout(space)
    except ValueError:
        return ColumnSpec(tuple(space.shape or ()), np.dtype(space.dtype))
    return ColumnSpec(shape, dtype)


FLOAT, BOOL = np.dtype(np.float32), np.dtype(bool)


def env_columns(obs_space: gym.Space, action_space: gym.Space) -> dict[str, ColumnSpec]:
    """The columns every fragment has, whatever the policy: what the env and the runner
    record for each step."""
    return {Columns.OBS: space_layout(obs_space), Columns.ACTIONS: space_layout(action_space),
            Columns.REWARDS: ColumnSpec((), FLOAT), Columns.TERMINATEDS: ColumnSpec((), BOOL),
            Columns.TRUNCATEDS: ColumnSpec((), BOOL), Columns.MASK: ColumnSpec((), BOOL)}


def action_dist_columns(num_dist_inputs: int) -> dict[str, ColumnSpec]:
    """The extra action outputs of a policy that samples from a distribution: the action's
    log-probability and the distribution's inputs."""
    return {Columns.ACTION_LOGP: ColumnSpec((), FLOAT),
            Columns.ACTION_DIST_INPUTS: ColumnSpec((num_dist_inputs,), FLOAT)}


#: Optional per-step columns a runner fills when a policy declares them.
def optional_columns(action_space: gym.Space) -> dict[str, ColumnSpec]:
    i64 = np.dtype(np.int64)
    return {Columns.EPS_ID: ColumnSpec((), i64), Columns.T: ColumnSpec((), i64),
            Columns.AGENT_INDEX: ColumnSpec((), i64),
            Columns.PREV_ACTIONS: space_layout(action_space),
            Columns.PREV_REWARDS: ColumnSpec((), FLOAT)}


#: Keys of a fragment that are not time-major columns.
FRAGMENT_KEYS = frozenset({
    "next_obs", "trunc_index", "trunc_obs", "env_steps", "episodes", "policy_version",
    "policy_lag", "policy_id", "worker_index", "idle", "policy_versions", "client_rejections",
    "num_nonfinite_steps_skipped", "num_episodes_unlisted", "num_reset_rows",
    "num_env_errors", "env_error",  # the sampler's env errors: a count, the first traceback
    "policy_batches", "agent_steps",  # a multi-agent fragment: one fragment per policy
    "runner_metrics"})  # what the runner's MetricsLogger took since the last fragment


def time_major_keys(fragment: dict[str, Any]) -> list[str]:
    return [k for k in fragment if k not in FRAGMENT_KEYS]


def check_columns(got: dict[str, Any], specs: dict[str, ColumnSpec], rows: int,
                  where: str) -> dict[str, np.ndarray]:
    """``got``'s columns of ``specs`` as arrays ``[rows, *shape]`` of the declared dtype, or a
    ValueError naming the first column that is missing, misshapen, not numeric or not finite
    (data from outside: a policy client's chunk)."""
    out = {}
    for key, spec in specs.items():
        if key not in got:
            raise ValueError(f"{where} lacks column {key!r}")
        arr = np.asarray(got[key])
        shape = (rows, *spec.shape)
        if arr.dtype.kind not in "biuf" or arr.shape != shape:
            raise ValueError(f"{where} column {key!r}: expected shape {shape} of numbers, got "
                             f"{arr.shape} of {arr.dtype}")
        if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
            raise ValueError(f"{where} column {key!r} has NaN or infinite values")
        out[key] = arr.astype(spec.dtype, copy=False)
    return out


# --- fragments into batches ---

def merge_fragments(fragments: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Fragments of one policy side by side along B, as one time-major batch ``[T, B]``.

    Every time-major column of the fragments is carried. Fragments of fewer rows (runners
    may differ by a step, complete-episode fragments by more) are padded at the end with
    masked rows marked terminated; a padded column's last real step, if not already done,
    becomes a truncation that bootstraps from its next_obs.
    """
    # Fragments without steps (an idle policy server's) only carry episode ends.
    fragments = [f for f in fragments if f["obs"].shape[0] and f["obs"].shape[1]]
    if not fragments:
        raise ValueError("merge_fragments: no fragment has any step")
    keys = time_major_keys(fragments[0])
    t_max = max(f["obs"].shape[0] for f in fragments)
    cols: dict[str, list[np.ndarray]] = {k: [] for k in keys}
    next_obs, trunc_index, trunc_obs = [], [], []
    offset = 0
    for i, f in enumerate(fragments):
        if set(time_major_keys(f)) != set(keys):
            raise ValueError(f"fragment {i} has columns {sorted(time_major_keys(f))}, "
                             f"fragment 0 has {sorted(keys)}")
        t, b = f["obs"].shape[:2]
        pad = t_max - t
        ti, to = np.asarray(f["trunc_index"]).reshape(-1, 2), np.asarray(f["trunc_obs"])
        for k in keys:
            a = np.asarray(f[k])
            if pad:
                filler = np.zeros((pad, *a.shape[1:]), dtype=a.dtype)
                if k == Columns.TERMINATEDS:
                    filler[:] = True
                a = np.concatenate([a, filler])
            cols[k].append(a)
        if pad:
            done = np.asarray(f["terminateds"][t - 1]) | np.asarray(f["truncateds"][t - 1])
            open_cols = np.flatnonzero(~done)
            cols["truncateds"][-1] = cols["truncateds"][-1].copy()
            cols["truncateds"][-1][t - 1, open_cols] = True
            ti = np.concatenate([ti, np.stack([np.full_like(open_cols, t - 1), open_cols], 1)])
            to = np.concatenate([to.reshape(-1, *f["next_obs"].shape[1:]), f["next_obs"][open_cols]])
        trunc_index.append(ti + [0, offset])
        trunc_obs.append(to.reshape(-1, *f["next_obs"].shape[1:]))
        next_obs.append(f["next_obs"])
        offset += b
    batch = {k: np.concatenate(v, axis=1) for k, v in cols.items()}
    batch["next_obs"] = np.concatenate(next_obs)
    batch["trunc_index"] = np.concatenate(trunc_index).astype(np.int64)
    batch["trunc_obs"] = np.concatenate(trunc_obs)
    return batch


def merge_by_policy(fragments: Iterable[dict[str, Any]]) -> dict[str, dict[str, np.ndarray]]:
    """Fragments grouped by their ``policy_id`` and merged: ``{policy_id: batch}``."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for f in per_policy(fragments):
        if f["obs"].shape[0] and f["obs"].shape[1]:
            groups.setdefault(f.get("policy_id", DEFAULT_POLICY_ID), []).append(f)
    return {pid: merge_fragments(fs) for pid, fs in groups.items()}


def per_policy(fragments: Iterable[dict[str, Any]]) -> Iterable[dict[str, Any]]:
    """Each policy's fragment: a multi-agent runner's holds one per policy under
    ``policy_batches``."""
    for f in fragments:
        if "policy_batches" in f:
            yield from f["policy_batches"].values()
        else:
            yield f


class MissingColumn(KeyError):
    """A loss or a policy asked a batch for a column it does not have."""

    def __str__(self) -> str:
        return str(self.args[0])


class SampleBatch(dict):
    """Flat samples ``{column: array [N, ...]}`` (RLlib's SampleBatch, as a plain dict), with
    the column names as class attributes: ``batch[SampleBatch.REWARDS]``. Asking for a
    column it lacks is a ``MissingColumn`` error that lists the columns it has."""

    def __missing__(self, key: str) -> Any:
        if key in _DERIVED and all(k in self for k in _DERIVED[key][0]):
            return _DERIVED[key][1](self)  # RLlib's column, read off rlmesh's
        raise MissingColumn(f"the batch has no column {key!r} (it has {sorted(self)}); a "
                            "policy adds columns by returning them from compute_actions or "
                            "postprocess_trajectory")

    OBS, ACTIONS, REWARDS = Columns.OBS, Columns.ACTIONS, Columns.REWARDS
    TERMINATEDS, TRUNCATEDS = Columns.TERMINATEDS, Columns.TRUNCATEDS
    ACTION_LOGP, ACTION_DIST_INPUTS = Columns.ACTION_LOGP, Columns.ACTION_DIST_INPUTS
    VF_PREDS, EPS_ID, T, INFOS = Columns.VF_PREDS, Columns.EPS_ID, Columns.T, Columns.INFOS
    NEXT_OBS, ADVANTAGES = Columns.NEXT_OBS, Columns.ADVANTAGES
    VALUE_TARGETS = Columns.VALUE_TARGETS

    @property
    def count(self) -> int:
        return len(self[Columns.REWARDS]) if Columns.REWARDS in self else 0

    @staticmethod
    def concat_samples(batches: list["SampleBatch"]) -> "SampleBatch":
        if not batches:
            return SampleBatch()
        keys = [k for k in batches[0] if all(k in b for b in batches)]
        return SampleBatch({k: np.concatenate([np.asarray(b[k]) for b in batches]) for k in keys})


#: RLlib's columns a SampleBatch derives when asked (``rlmesh.policy.sample_batch``): "dones"
#: from the two done flags, per-step "new_obs" from a trajectory's obs and its next_obs.
_DERIVED: dict[str, tuple[tuple[str, ...], Callable[[SampleBatch], np.ndarray]]] = {
    "dones": ((Columns.TERMINATEDS, Columns.TRUNCATEDS),
              lambda b: np.asarray(b[Columns.TERMINATEDS]) | np.asarray(b[Columns.TRUNCATEDS])),
    "new_obs": ((Columns.OBS, Columns.NEXT_OBS), lambda b: np.concatenate(
        [np.asarray(b[Columns.OBS])[1:], np.asarray(b[Columns.NEXT_OBS])[None]])),
}


def trajectories(batch: dict[str, Any]) -> list[SampleBatch]:
    """A time-major batch cut into trajectories: each env column's valid rows, split after
    every step that ended an episode, as flat SampleBatches in time order. Each carries
    ``next_obs`` (the observation after its last step) and ``t``: the step's index in its
    episode as the runner recorded it when the policy declared ``t``, else its index within
    the trajectory (the same for a whole episode). Columns the batch holds per step are
    carried; fragment keys are not."""
    mask = np.asarray(batch[Columns.MASK], bool)
    done = np.asarray(batch[Columns.TERMINATEDS], bool) | np.asarray(batch[Columns.TRUNCATEDS], bool)
    keys = time_major_keys(batch)
    trunc = {(int(t), int(b)): i for i, (t, b) in enumerate(np.asarray(batch["trunc_index"]).reshape(-1, 2))}
    t_max, width = mask.shape
    out = []
    for b in range(width):
        rows = np.flatnonzero(mask[:, b])
        ends = [i + 1 for i, t in enumerate(rows) if done[t, b]]
        for start, stop in zip([0, *ends], [*ends, len(rows)]):
            if stop <= start:
                continue
            index = rows[start:stop]
            traj = SampleBatch({k: np.asarray(batch[k])[index, b] for k in keys})
            last = int(index[-1])
            if (last, b) in trunc:
                traj[Columns.NEXT_OBS] = np.asarray(batch["trunc_obs"])[trunc[(last, b)]]
            elif last + 1 < t_max and mask[last + 1, b]:
                traj[Columns.NEXT_OBS] = np.asarray(batch[Columns.OBS])[last + 1, b]
            else:
                traj[Columns.NEXT_OBS] = np.asarray(batch["next_obs"])[b]
            if Columns.T not in traj:
                traj[Columns.T] = np.arange(len(index))
            out.append(traj)
    return out


def postprocessed_samples(batch: dict[str, Any],
                          postprocess: Callable[[SampleBatch], SampleBatch] | None) -> SampleBatch:
    """A time-major batch as flat samples, each trajectory run through ``postprocess``
    (a policy's ``postprocess_trajectory``) first when one is given. ``next_obs`` is kept
    per trajectory only, so it is dropped from the joined samples."""
    trajs = trajectories(batch)
    if postprocess is not None:
        trajs = [postprocess(t) for t in trajs]
    for t in trajs:
        t.pop(Columns.NEXT_OBS, None)
    return SampleBatch.concat_samples(trajs)


def shard_batch(batch: dict[str, Any], n: int) -> list[dict[str, np.ndarray]]:
    """A time-major batch cut along B into ``n`` near-equal shards (data-parallel learners),
    each with its own ``next_obs`` and truncations. A batch narrower than ``n`` (one env
    runner with one env, two learners) is first cut along time (``fold_time``): every rank
    gets data, where a cut along B alone left one an empty shard its model could not run."""
    width = np.asarray(batch["mask"]).shape[1]
    if width < n:
        batch = fold_time(batch, -(-n // width))
        width = np.asarray(batch["mask"]).shape[1]
    bounds = np.linspace(0, width, n + 1).astype(int)
    index = np.asarray(batch["trunc_index"]).reshape(-1, 2)
    trunc_obs = np.asarray(batch["trunc_obs"])
    shards = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        shard = {k: np.asarray(batch[k])[:, lo:hi] for k in time_major_keys(batch)}
        shard["next_obs"] = np.asarray(batch["next_obs"])[lo:hi]
        mine = (index[:, 1] >= lo) & (index[:, 1] < hi)
        shard["trunc_index"] = index[mine] - [0, lo]
        shard["trunc_obs"] = trunc_obs[mine]
        shards.append(shard)
    return shards


def fold_time(batch: dict[str, Any], k: int) -> dict[str, Any]:
    """A time-major batch ``[T, B]`` as ``[ceil(T/k), k*B]``: each env's column cut into
    ``k`` consecutive pieces side by side (piece ``j`` of env ``b`` is column ``j*B + b``).
    A piece's ``next_obs`` is the observation after its last row (the next piece's first),
    so GAE and V-trace bootstrap across the cut as they would have; truncations move with
    their rows. When ``k`` does not divide T, the first piece is padded at its start
    (``mask`` False): padding before the data changes no return computed backwards."""
    mask = np.asarray(batch["mask"])
    t, width = mask.shape[:2]
    rows = -(-t // k)
    pad = rows * k - t

    def fold(arr: np.ndarray) -> np.ndarray:
        padded = np.concatenate([np.zeros((pad, *arr.shape[1:]), arr.dtype), arr]) if pad else arr
        pieces = padded.reshape(k, rows, *arr.shape[1:])  # [k, rows, B, ...]
        return np.moveaxis(pieces, 0, 1).reshape(rows, k * width, *arr.shape[2:])

    out = {key: fold(np.asarray(batch[key])) for key in time_major_keys(batch)}
    obs = np.asarray(batch[Columns.OBS])
    firsts = [obs[(j + 1) * rows - pad] for j in range(k - 1)]  # each next piece's first row
    out["next_obs"] = np.concatenate([*firsts, np.asarray(batch["next_obs"])])
    index = np.asarray(batch["trunc_index"]).reshape(-1, 2)
    padded_t = index[:, 0] + pad
    out["trunc_index"] = np.stack([padded_t % rows, (padded_t // rows) * width + index[:, 1]],
                                  axis=1).astype(index.dtype)
    out["trunc_obs"] = np.asarray(batch["trunc_obs"])
    for key in FRAGMENT_KEYS - {"next_obs", "trunc_index", "trunc_obs"}:
        if key in batch:
            out[key] = batch[key]
    return out
