"""Whether a config's batches can be held at all: checked before any process starts, so a
typo'd ``train_batch_size`` (1e12) is one line naming the setting, not a numpy allocation
error from an env runner."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlmesh.config.settings import ConfigError


def step_bytes(obs_space: Any, action_space: Any) -> int:
    """Bytes one step takes in a fragment: the columns every fragment has."""
    from rlmesh.rl.columns import env_columns

    try:
        specs = env_columns(obs_space, action_space)
    except Exception:  # a space only a user's own policy reads (or none): no estimate, and
        return 0  # an estimate must never stop a run that would work
    return sum(int(np.prod(s.shape, dtype=np.int64)) * s.dtype.itemsize for s in specs.values())


def check_batch_memory(config: Any, obs_space: Any, action_space: Any,
                       memory: int | None = None) -> None:
    """ConfigError when one runner's fragment or one train batch of ``config`` would take
    more than ``memory`` bytes (default: this machine's RAM), counting only the columns
    every step has (so it errs on the side of letting a run start)."""
    row = step_bytes(obs_space, action_space)
    if row == 0:
        return
    if memory is None:
        import psutil

        memory = psutil.virtual_memory().total
    fragment = config.get_rollout_fragment_length(1) * config.num_envs_per_env_runner
    for key, steps in (("train_batch_size", config.total_train_batch_size),
                       ("rollout_fragment_length", fragment)):
        if steps * row > memory:
            raise ConfigError(
                f"{key}: {steps:,} steps of {row} bytes each ({_size(steps * row)}) would not "
                f"fit in this machine's memory ({_size(memory)}); lower train_batch_size "
                "(and rollout_fragment_length, if set)")


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"
