"""Packed records of nested spaces (``rl/nested_spaces.py``) as torch tensors: the leaves of a
batch of records unpacked (one copy each), and packed back."""

from __future__ import annotations

import numpy as np
import torch

from rlmesh.rl.nested_spaces import Leaf

_TORCH_DTYPES = {np.dtype(np.int64): torch.int64, np.dtype(np.uint8): torch.uint8,
                 np.dtype(np.float32): torch.float32, np.dtype(np.int8): torch.int8}


def torch_dtype(dtype: np.dtype) -> torch.dtype:
    return _TORCH_DTYPES[np.dtype(dtype)]


def unpack_tensor(leaves: list[Leaf], records: torch.Tensor) -> dict[tuple, torch.Tensor]:
    """Records ``[..., record_size]`` (uint8) -> ``{leaf path: [..., *leaf shape]}``."""
    lead = records.shape[:-1]
    out = {}
    for leaf in leaves:
        part = records[..., leaf.offset:leaf.offset + leaf.nbytes]
        # A fresh copy: viewing bytes as a wider dtype needs aligned strides, which a slice
        # (even one that counts as contiguous, as a single row does) does not promise.
        if leaf.dtype.itemsize > 1:
            part = torch.empty(part.shape, dtype=torch.uint8, device=part.device).copy_(part)
        out[leaf.path] = part.view(torch_dtype(leaf.dtype)).reshape(*lead, *leaf.shape)
    return out


def pack_tensors(leaves: list[Leaf], values: dict[tuple, torch.Tensor]) -> torch.Tensor:
    """The inverse of ``unpack_tensor``: leaves ``[..., *shape]`` -> records ``[..., size]``."""
    parts = []
    for leaf in leaves:
        v = values[leaf.path]
        lead = v.shape[:v.ndim - len(leaf.shape)]
        parts.append(v.to(torch_dtype(leaf.dtype)).reshape(*lead, -1).contiguous().view(torch.uint8))
    return torch.cat(parts, dim=-1)
