"""The shared noise table of evolution strategies (Salimans et al. 2017): one block of
standard normal float32 numbers made from a seed, so a perturbation crosses the wire as one
integer (its offset in the table) instead of a vector as long as the policy.

A table is made once per node: the first process to ask writes it to a file (under a lock),
every process of that node maps the file read-only, and the kernel's page cache holds one
copy for all of them (a 25M-entry table is 100 MB once, not 100 MB per runner).
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path

import numpy as np

#: RLlib's seed for its noise table; fixed, so every process and every run of a node shares
#: one file (the table is data, not an experiment's randomness: perturbation offsets are).
NOISE_SEED = 123
_CHUNK = 1 << 22  # entries generated per step, so making a large table needs little memory


def noise_dir() -> Path:
    """Where tables live: ``$RLMESH_NOISE_DIR``, else the node's temporary directory."""
    return Path(os.environ.get("RLMESH_NOISE_DIR") or Path(tempfile.gettempdir()) / "rlmesh-noise")


def make_noise(size: int, seed: int = NOISE_SEED) -> np.ndarray:
    """The table's numbers in memory: ``size`` standard normals (float32) from ``seed``,
    drawn in chunks from one generator (the same numbers as one draw of ``size``)."""
    rng = np.random.default_rng(seed)
    out = np.empty(size, np.float32)
    for start in range(0, size, _CHUNK):
        stop = min(size, start + _CHUNK)
        rng.standard_normal(stop - start, dtype=np.float32, out=out[start:stop])
    return out


class NoiseTable:
    """``noise[i : i + dim]`` is the perturbation with index ``i``; ``sample_index`` draws one."""

    def __init__(self, noise: np.ndarray) -> None:
        self.noise = noise

    @classmethod
    def shared(cls, size: int, seed: int = NOISE_SEED, directory: Path | None = None) -> "NoiseTable":
        """The node's table of ``size`` entries from ``seed``: mapped read-only from its
        file, which the first caller on this node writes (atomically, under a lock)."""
        directory = Path(directory) if directory is not None else noise_dir()
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"noise-{seed}-{size}.f32"
        expected = size * 4
        if not (path.exists() and path.stat().st_size == expected):
            with open(directory / f"{path.name}.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # others wait here for the one writer
                if not (path.exists() and path.stat().st_size == expected):
                    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
                    make_noise(size, seed).tofile(tmp)
                    os.replace(tmp, path)
        return cls(np.memmap(path, np.float32, mode="r", shape=(size,)))

    def __len__(self) -> int:
        return len(self.noise)

    def get(self, index: int, dim: int) -> np.ndarray:
        """The perturbation ``index`` of a ``dim``-parameter policy (a read-only view)."""
        return self.noise[index:index + dim]

    def sample_index(self, rng: np.random.Generator, dim: int) -> int:
        if dim > len(self.noise):
            raise ValueError(f"the policy has {dim} parameters, more than the noise table's "
                             f"{len(self.noise)} entries: raise noise_size or use a smaller model")
        return int(rng.integers(0, len(self.noise) - dim + 1))
