"""Nested (Tuple / Dict) spaces as flat columns, without torch: the leaves of a space, the
column layout of each leaf, and a nested value packed into one uint8 record per step and
back. The records are the leaves' bytes side by side (numpy arrays, nothing pickled), so
every consumer of a column (fragment buffer, wire, merge, replay, minibatches) handles a
Dict observation as it handles pixels; the model and the distributions unpack them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np


class ObservationError(ValueError):
    """An observation (or action) that does not match its declared space."""


@dataclass(frozen=True)
class Leaf:
    """One leaf of a space: where it sits (``path``, dict keys or tuple indices), its space,
    how one value is stored (``shape``, ``dtype``) and its bytes in a packed record."""

    path: tuple
    space: gym.Space
    shape: tuple[int, ...]
    dtype: np.dtype
    offset: int
    nbytes: int

    @property
    def name(self) -> str:
        return "/".join(str(p) for p in self.path) or "<root>"


def is_nested(space: gym.Space) -> bool:
    return isinstance(space, (gym.spaces.Tuple, gym.spaces.Dict))


def leaf_layout(space: gym.Space) -> tuple[tuple[int, ...], np.dtype]:
    """How one value of a non-nested space is stored: int64 for Discrete and MultiDiscrete,
    int8 for MultiBinary, float32 for Box (uint8 and bool Box, i.e. pixels and boolean
    grids, are stored as uint8)."""
    if isinstance(space, gym.spaces.Discrete):
        return (), np.dtype(np.int64)
    if isinstance(space, gym.spaces.Box):
        # Pixels and boolean grids (MinAtar) stay one byte per value.
        small = space.dtype in (np.uint8, np.bool_)
        return tuple(space.shape), np.dtype(np.uint8 if small else np.float32)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return tuple(space.shape), np.dtype(np.int64)
    if isinstance(space, gym.spaces.MultiBinary):
        return tuple(space.shape), np.dtype(np.int8)
    raise ValueError(f"space {space} is not supported: rlmesh takes Box, Discrete, "
                     f"MultiDiscrete, MultiBinary and Tuple/Dict of them")


def leaves(space: gym.Space, path: tuple = ()) -> list[Leaf]:
    """The leaves of ``space`` in a fixed order (Dict keys in the space's order, Tuple
    entries in theirs), with their offsets in a packed record."""
    out: list[Leaf] = []
    _collect(space, path, out)
    return out


def _collect(space: gym.Space, path: tuple, out: list[Leaf]) -> None:
    if isinstance(space, gym.spaces.Dict):
        for key, sub in space.spaces.items():
            _collect(sub, (*path, key), out)
    elif isinstance(space, gym.spaces.Tuple):
        for i, sub in enumerate(space.spaces):
            _collect(sub, (*path, i), out)
    else:
        shape, dtype = leaf_layout(space)
        offset = out[-1].offset + out[-1].nbytes if out else 0
        out.append(Leaf(path, space, shape, dtype, offset, int(np.prod(shape)) * dtype.itemsize))


def record_size(space: gym.Space) -> int:
    """Bytes of one packed record of a nested space."""
    last = leaves(space)[-1]
    return last.offset + last.nbytes


def get_path(value: Any, path: tuple, leaf: Leaf | None = None) -> Any:
    for p in path:
        try:
            value = value[p]
        except (KeyError, IndexError, TypeError):
            name = leaf.name if leaf else "/".join(map(str, path))
            raise ObservationError(f"observation lacks {name!r} of its space (got "
                                   f"{type(value).__name__}"
                                   f"{' with keys ' + str(sorted(value)) if isinstance(value, dict) else ''})"
                                   ) from None
    return value


def check_leaf(leaf: Leaf, value: Any, batch: int | None, what: str = "observation") -> np.ndarray:
    """``value`` as the leaf's stored dtype, ``[batch, *shape]`` (or ``shape`` when
    ``batch`` is None), or one ObservationError naming the leaf, the expected and the
    received shape and dtype."""
    arr = np.asarray(value)
    want = leaf.shape if batch is None else (batch, *leaf.shape)
    if arr.shape != want or arr.dtype.kind not in "biuf":
        key = f" {leaf.name!r}" if leaf.path else ""
        numeric = "" if arr.dtype.kind in "biuf" else " (not numeric)"
        raise ObservationError(
            f"{what}{key} does not match its space {leaf.space}: expected shape {want} of "
            f"{np.dtype(leaf.space.dtype)}, got shape {arr.shape} of {arr.dtype}{numeric}")
    return arr.astype(leaf.dtype, copy=False)


def pack(space: gym.Space, value: Any, batch: int | None = None,
         what: str = "observation") -> np.ndarray:
    """A nested value (or a batch of them, leaves ``[batch, ...]``) as packed uint8 records
    ``[record_size]`` (``[batch, record_size]``)."""
    ls = leaves(space)
    n = 1 if batch is None else batch
    parts = [np.ascontiguousarray(check_leaf(leaf, get_path(value, leaf.path, leaf), batch, what)
                                  ).reshape(n, -1).view(np.uint8) for leaf in ls]
    out = np.concatenate(parts, axis=1)
    return out[0] if batch is None else out


def pack_list(space: gym.Space, values: list[Any], what: str = "observation") -> np.ndarray:
    """A list of nested values as records ``[len(values), record_size]``."""
    return np.stack([pack(space, v, None, what) for v in values])


def unpack(space: gym.Space, records: np.ndarray) -> Any:
    """Packed records ``[..., record_size]`` -> the nested structure (dicts / tuples) of
    arrays ``[..., *leaf shape]``; the inverse of ``pack``."""
    records = np.asarray(records)
    lead = records.shape[:-1]
    flat = records.reshape(-1, records.shape[-1])
    values = {leaf.path: np.ascontiguousarray(flat[:, leaf.offset:leaf.offset + leaf.nbytes])
              .view(leaf.dtype).reshape((*lead, *leaf.shape)) for leaf in leaves(space)}
    return build(space, values)


def build(space: gym.Space, values: dict[tuple, Any], path: tuple = ()) -> Any:
    """The nested structure of ``space`` with the leaf at each path taken from ``values``."""
    if isinstance(space, gym.spaces.Dict):
        return {k: build(s, values, (*path, k)) for k, s in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(build(s, values, (*path, i)) for i, s in enumerate(space.spaces))
    return values[path]


def describe_mismatch(space: gym.Space, value: Any, what: str = "observation") -> str:
    """Why ``value`` does not fit a non-nested ``space`` (one line)."""
    arr = np.asarray(value)
    shape, _ = leaf_layout(space)
    return (f"{what} does not match its space {space}: expected shape {shape} of "
            f"{np.dtype(space.dtype)}, got shape {arr.shape} of {arr.dtype}")


def to_column(space: gym.Space, value: Any, what: str = "observation") -> np.ndarray:
    """One value as its column stores it: a packed record for Tuple/Dict spaces, else an
    array of the leaf's dtype; an ObservationError when it does not match the space."""
    if is_nested(space):
        return pack(space, value, None, what)
    try:
        layout = leaf_layout(space)
    except ValueError:  # a space only a user's own policy reads: passed as it is
        return np.asarray(value)
    return check_leaf(Leaf((), space, *layout, 0, 0), value, None, what)


def from_column(space: gym.Space, value: np.ndarray) -> Any:
    """The inverse of ``to_column`` (works on a batch as well)."""
    return unpack(space, value) if is_nested(space) else value
