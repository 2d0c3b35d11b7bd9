"""Non-finite values (NaN, inf) where data enters training: the error that names them and
the one check over a batch's float columns (``on_nonfinite`` in the config says what
happens then)."""

from __future__ import annotations

from typing import Any

import numpy as np

#: The largest float32: a Python float beyond it becomes inf in a float32 column.
FLOAT32_MAX = float(np.finfo(np.float32).max)


class NonFiniteError(ValueError):
    """A NaN or infinite value where training data or an update must be finite."""


def describe(values: Any) -> str:
    """``'nan'``, ``'inf'`` or ``'-inf'``: the first non-finite value of ``values``."""
    flat = np.asarray(values, dtype=np.float64).ravel()
    bad = flat[~np.isfinite(flat)]
    return str(bad[0]) if bad.size else "finite"


#: The columns of a train batch that come from outside the learner (envs, clients, the
#: sampling policy). Others may be non-finite by design (-inf logits of masked actions).
CHECKED = ("obs", "next_obs", "trunc_obs", "rewards", "actions", "action_logp")


def first_nonfinite_column(batch: dict[str, Any]) -> str | None:
    """The first checked float column of ``batch`` holding a NaN or inf, else None. One
    ``isfinite`` per column: ~10 us for a 4,000-step CartPole batch, next to ~ms updates."""
    for key in CHECKED:
        value = batch.get(key)
        if isinstance(value, np.ndarray) and value.dtype.kind == "f" and value.size:
            if not np.isfinite(value).all():
                return key
    return None
