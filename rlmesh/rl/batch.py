"""The learner's moves with a batch: its columns as tensors on the learner's device, and the
minibatches of an epoch. (The columns themselves are declared in ``rl/columns.py``.)"""

from __future__ import annotations

import warnings
from typing import Iterator, Mapping, Union

import numpy as np
import torch

Array = Union[np.ndarray, torch.Tensor]
Batch = dict[str, Array]


def minibatches(n: int, minibatch_size: int, rng: np.random.Generator | None,
                num_minibatches: int | None = None) -> Iterator[np.ndarray]:
    """Index arrays of one epoch over ``n`` samples.

    Every sample appears exactly once: in a fresh permutation (``rng``; None keeps the
    batch's order, ``shuffle_batch_per_epoch=False``), cut into minibatches of
    ``minibatch_size`` and a last, shorter one if the size does not divide ``n`` (kept,
    not dropped), or into exactly ``num_minibatches`` near-equal parts when given (so
    data-parallel learners with shards of different sizes step the same number of times).
    """
    if minibatch_size < 1:
        raise ValueError(f"minibatch_size must be at least 1, got {minibatch_size}")
    order = np.arange(n) if rng is None else rng.permutation(n)
    if num_minibatches is not None:
        yield from np.array_split(order, num_minibatches)
        return
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
    if device.type == "cpu" and type(x) is np.ndarray and x.flags.writeable and x.dtype.isnative:
        try:  # the common case in one call (the checks below cost 3 us a column)
            return torch.from_numpy(x)
        except ValueError:  # negative strides: copied below
            pass
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
