"""What a node offers (``detect_resources``, run on the node itself) and the hash of the
setup it is given (``config_hash``), by which the head tells whether a node needs it again."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Protocol, Sequence


class Synced(Protocol):
    """What config_hash reads of a ``[[sync]]`` entry (cluster_config.SyncEntry)."""

    @property
    def dst(self) -> str: ...

    def files(self) -> list[tuple[str, Path]]: ...


# --- the setup hash ----------------------------------------------------------------------------

def config_hash(commands: Sequence[str], sync: Sequence[Synced]) -> str:
    """A hex digest of the setup commands and of what ``sync`` copies: each entry's ``dst``,
    and its files' relative paths, contents and executable bits (a symlink: its target).
    Where ``src`` lies on the head, and modification times, do not count."""
    digest = hashlib.sha256(b"rlmesh-setup-v1")
    _feed(digest, "commands", str(len(commands)), *commands)
    for entry in sync:
        _feed(digest, "sync", entry.dst)
        for rel, path in entry.files():
            if path.is_symlink():
                _feed(digest, "link", rel, os.readlink(path))
            else:
                executable = os.stat(path).st_mode & 0o111 != 0
                _feed(digest, "file", rel, str(executable), _file_digest(path))
    return digest.hexdigest()


def _feed(digest: Any, *parts: str) -> None:
    for part in parts:  # length-prefixed, so ("ab", "c") and ("a", "bc") differ
        data = part.encode("utf-8", "surrogateescape")
        digest.update(len(data).to_bytes(8, "big") + data)


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


# --- what a node offers ------------------------------------------------------------------------

def detect_resources() -> dict[str, float]:
    """CPU, GPU and memory (bytes) of this machine, as the node agent reports them."""
    import psutil

    cpus = psutil.cpu_count() or 1
    if hasattr(os, "sched_getaffinity"):  # a container or taskset may give us fewer
        cpus = min(cpus, len(os.sched_getaffinity(0)) or cpus)
    return {"CPU": float(cpus), "GPU": float(_count_gpus()),
            "memory": float(psutil.virtual_memory().total)}


def _count_gpus() -> int:
    """nvidia-smi's count, else torch's if torch is already imported (importing it here would
    cost seconds), else 0: a machine without either has no GPU we could use."""
    smi = shutil.which("nvidia-smi")
    if smi is not None:
        try:
            done = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20,
                                  check=False)
        except (OSError, subprocess.SubprocessError):
            done = None
        if done is not None and done.returncode == 0:
            listed = sum(1 for line in done.stdout.splitlines() if line.startswith("GPU "))
            return _visible(listed, os.environ.get("CUDA_VISIBLE_DEVICES"))
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            return int(torch.cuda.device_count())  # it reads CUDA_VISIBLE_DEVICES itself
        except Exception:  # a broken CUDA install: the node still runs CPU work
            return 0
    return 0


def _visible(listed: int, cuda_visible: str | None) -> int:
    """The GPUs CUDA will show, of ``listed``: CUDA_VISIBLE_DEVICES, when set, keeps those
    named before its first empty or negative entry."""
    if cuda_visible is None:
        return listed
    count = 0
    for entry in cuda_visible.split(","):
        entry = entry.strip()
        if not entry or entry.startswith("-"):
            break
        count += 1
    return min(listed, count)
