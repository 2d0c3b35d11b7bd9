"""A count an actor process keeps in a file mapped into memory (``procs/.<name>.<key>`` in the
run directory), so that its supervisor can read it after the process died: a crash sends no
reply, and a heartbeat's report is up to a second old (an env runner that segfaults every
500 steps dies between two of them). An env runner's env steps, for ``DeathBudget``."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import numpy as np


def counter_path(run_dir: Path, name: str, key: str) -> Path:
    return run_dir / "procs" / f".{name}.{key}"


def shared_count(path: Path) -> np.ndarray:
    """A 1-element int64 array backed by ``path`` (made anew, 0): what the process adds to it
    is in the file at once, whatever becomes of the process."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.ftruncate(fd, 8)
        buf = mmap.mmap(fd, 8)
    finally:
        os.close(fd)
    return np.ndarray((1,), np.int64, buffer=buf)


def take_count(path: Path) -> int | None:
    """The count in ``path``, the file removed (the next process of the name may die before
    it makes its own, and must not be credited with this one's work); None: no such file, as
    for a process on another node."""
    try:
        data = path.read_bytes()
        path.unlink()
    except OSError:
        return None
    return int(np.frombuffer(data, np.int64, count=1)[0]) if len(data) >= 8 else None
