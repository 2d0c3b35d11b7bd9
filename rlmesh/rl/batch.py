"""Sample batches: dicts of time-major ``[T, B, ...]`` numpy arrays or tensors, the column
names they use, and the moves from fragments to shuffled minibatches on the learner's device.
"""

from __future__ import annotations

import warnings
from typing import Iterator, Mapping, Union

import numpy as np
import torch

Array = Union[np.ndarray, torch.Tensor]
Batch = dict[str, Array]


class Columns:
    """Column names shared by env runners and learners (RLlib's spelling)."""

    OBS = "obs"
    ACTIONS = "actions"  # as sampled: unclipped for DiagGaussian
    REWARDS = "rewards"
    TERMINATEDS = "terminateds"
    TRUNCATEDS = "truncateds"
    ACTION_LOGP = "action_logp"  # log-prob under the policy that sampled the action
    ACTION_DIST_INPUTS = "action_dist_inputs"
    VF_PREDS = "vf_preds"  # V(s_t)
    BOOTSTRAP_VALUES = "bootstrap_values"  # V(s_{t+1}) of the true next obs, see compute_gae
    ADVANTAGES = "advantages"
    VALUE_TARGETS = "value_targets"


def _check_time_major(batch: Mapping[str, Array]) -> tuple[int, int]:
    """``(T, B)`` shared by every column, or a ValueError naming the column that differs."""
    if not batch:
        raise ValueError("empty batch: no columns")
    shapes = {k: tuple(v.shape) for k, v in batch.items()}
    for k, s in shapes.items():
        if len(s) < 2:
            raise ValueError(f"column {k!r} has shape {s}; time-major columns are [T, B, ...]")
    first = next(iter(shapes))
    t_b = shapes[first][:2]
    for k, s in shapes.items():
        if s[:2] != t_b:
            raise ValueError(f"column {k!r} has [T, B] = {list(s[:2])}, column {first!r} has {list(t_b)}")
    return t_b


def concat_fragments(fragments: list[Mapping[str, Array]]) -> Batch:
    """Fragments with the same columns and the same ``T`` side by side: ``[T, sum(B), ...]``."""
    if not fragments:
        raise ValueError("concat_fragments: no fragments")
    keys = set(fragments[0])
    T = _check_time_major(fragments[0])[0]
    for i, frag in enumerate(fragments[1:], start=1):
        if set(frag) != keys:
            raise ValueError(
                f"fragment {i} has columns {sorted(frag)}, fragment 0 has {sorted(keys)}"
            )
        if _check_time_major(frag)[0] != T:
            raise ValueError(f"fragment {i} has T = {_check_time_major(frag)[0]}, fragment 0 has T = {T}")
    out: Batch = {}
    for k in fragments[0]:
        cols = [f[k] for f in fragments]
        out[k] = torch.cat(cols, dim=1) if isinstance(cols[0], torch.Tensor) else np.concatenate(cols, axis=1)
    return out


def flatten_time(batch: Mapping[str, Array]) -> Batch:
    """``[T, B, ...]`` -> ``[T*B, ...]``; sample ``t*B + b`` is step t of env b."""
    T, B = _check_time_major(batch)
    return {k: v.reshape(T * B, *v.shape[2:]) for k, v in batch.items()}


def batch_size(batch: Mapping[str, Array]) -> int:
    """The common first dimension of a flat batch."""
    sizes = {k: len(v) for k, v in batch.items()}
    if len(set(sizes.values())) != 1:
        raise ValueError(f"columns of a flat batch differ in length: {sizes}")
    return next(iter(sizes.values()))


def minibatches(batch: Mapping[str, Array] | int, minibatch_size: int,
                rng: np.random.Generator) -> Iterator[np.ndarray]:
    """Index arrays of one epoch over a flat batch (or over ``batch`` samples if an int).

    A fresh permutation: every sample appears exactly once, in minibatches of
    ``minibatch_size`` and a last, shorter one if the size does not divide the batch
    (kept, not dropped). Index a column with ``col[idx]`` (a tensor on an accelerator:
    ``torch.as_tensor(idx, device=col.device)``).
    """
    if minibatch_size < 1:
        raise ValueError(f"minibatch_size must be at least 1, got {minibatch_size}")
    n = batch if isinstance(batch, int) else batch_size(batch)
    order = rng.permutation(n)
    for start in range(0, n, minibatch_size):
        yield order[start:start + minibatch_size]


def to_tensors(batch: Mapping[str, Array], device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """Every column as a tensor on ``device``, copying only where it must.

    A writable numpy array is shared with its tensor on CPU (``torch.from_numpy``). A
    read-only one (what the wire decodes: a view of the received frame, over ``inproc``
    the sender's own array) is copied once on CPU, so nothing written to the tensor can
    reach the buffer; for another device the one host-to-device copy is the only copy.
    """
    device = torch.device(device)
    return {k: _to_tensor(v, device) for k, v in batch.items()}


def _to_tensor(x: Array, device: torch.device) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.to(device)
    x = np.asarray(x)
    if not x.dtype.isnative:
        x = x.astype(x.dtype.newbyteorder("="))
    if any(s < 0 for s in x.strides):
        x = np.ascontiguousarray(x)  # torch.from_numpy refuses negative strides
    if x.flags.writeable:
        return torch.from_numpy(x).to(device)
    if device.type == "cpu":
        return torch.from_numpy(x.copy())
    with warnings.catch_warnings():
        # The view is only read, by the copy to the device, and then dropped.
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(x).to(device)
