"""The per-job run directory: who runs where, named actors, logs, sockets, stack dumps.

Layout of ``<root>/<job_id>/``: ``procs/<name>.json`` (one per live process),
``names/<name>.json`` (named actors), ``logs/``, ``sock/`` (ipc endpoints), ``stacks/``.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import stat
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

import psutil

ENV_RUN_DIR = "RLMESH_RUN_DIR"


def runs_root() -> Path:
    """Where run directories live; short, because ipc socket paths must stay < 108 bytes."""
    return Path(os.environ.get("RLMESH_RUNS_ROOT", f"/tmp/rlmesh-{os.getuid()}"))


class UnsafeRunsRoot(PermissionError):
    """The runs root, or a folder above it, is one another user could change: they could
    move a live job's directory away and put their own sockets in its place."""


def check_runs_root(root: Path) -> Path:
    """``root``, made (mode 0700) if missing, once it and every folder above it are safe:
    owned by this user or root, and not writable by others unless sticky (as /tmp). The
    root itself must be this user's. Symlinks on the way count as the folders they are in,
    and their targets are checked too; else ``UnsafeRunsRoot``, saying what to do."""
    root = Path(os.path.abspath(root))
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    uid = os.getuid()
    for path in _chain(root) + _chain(root.resolve()):
        st = os.lstat(path)
        mine = path in (root, root.resolve())
        if st.st_uid != uid and (mine or st.st_uid != 0):
            raise UnsafeRunsRoot(
                f"the runs root {root} is not safe: {path} belongs to uid {st.st_uid}, not to "
                f"you (uid {uid}), so that user could move a running job's sockets; remove it, "
                "or set RLMESH_RUNS_ROOT to a folder of your own")
        writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        if not stat.S_ISLNK(st.st_mode) and writable and not st.st_mode & stat.S_ISVTX:
            raise UnsafeRunsRoot(
                f"the runs root {root} is not safe: {path} is writable by other users (mode "
                f"{stat.S_IMODE(st.st_mode):o}) and not sticky, so they could move a running "
                f"job's sockets; chmod go-w {path}, or set RLMESH_RUNS_ROOT to a folder of "
                "your own")
    return root


def _chain(path: Path) -> list[Path]:
    """``path`` and the folders above it, up to /."""
    return [path, *path.parents]


def new_job_id() -> str:
    return time.strftime("%m%d-%H%M%S-") + secrets.token_hex(2)


@dataclass
class ProcessRecord:
    """What ``rlmesh stack`` and named-actor lookups need to find a process."""

    name: str
    role: str
    pid: int
    create_time: float
    control: str
    address: str = ""
    cls: str = ""
    job: str = ""

    def is_alive(self) -> bool:
        try:
            proc = psutil.Process(self.pid)
            return abs(proc.create_time() - self.create_time) < 1.0 and proc.status() != psutil.STATUS_ZOMBIE
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return False


class RunDir:
    """One job's run directory."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.job_id = path.name

    @classmethod
    def create(cls, job_id: str | None = None, root: Path | None = None) -> "RunDir":
        path = check_runs_root(root or runs_root()) / (job_id or new_job_id())
        for sub in ("procs", "names", "logs", "sock", "stacks"):
            (path / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(path, 0o700)
        return cls(path)

    def ipc_address(self, name: str, suffix: str) -> str:
        path = self.path / "sock" / f"{name}.{suffix}"
        if len(str(path)) > 100:  # AF_UNIX path limit
            path = self.path / "sock" / f"{hashlib.sha1(name.encode()).hexdigest()[:12]}.{suffix}"
        return f"ipc://{path}"

    def log_path(self, name: str) -> Path:
        return self.path / "logs" / f"{name}.log"

    def stack_dump_path(self, name: str, pid: int) -> Path:
        return self.path / "stacks" / f"{name}.{pid}.txt"

    # --- process records ---

    def write_process(self, rec: ProcessRecord) -> None:
        _write_json_atomic(self.path / "procs" / f"{rec.name}.json", asdict(rec))

    def remove_process(self, name: str) -> None:
        (self.path / "procs" / f"{name}.json").unlink(missing_ok=True)

    def read_process(self, name: str) -> ProcessRecord | None:
        data = _read_json(self.path / "procs" / f"{name}.json")
        return ProcessRecord(**data) if data else None

    def processes(self) -> Iterator[ProcessRecord]:
        for p in sorted((self.path / "procs").glob("*.json")):
            data = _read_json(p)
            if data:
                yield ProcessRecord(**data)

    # --- named actors ---

    def register_name(self, name: str, address: str, owner_pid: int,
                      replace: bool = False) -> None:
        """Record ``name`` at ``address``; ``replace`` moves a name already taken (its actor
        was started again elsewhere)."""
        path = self.path / "names" / f"{name}.json"
        current = _read_json(path)
        if (not replace and current and current["address"] != address
                and psutil.pid_exists(current["pid"])):
            raise ValueError(f"an actor named {name!r} already exists in job {self.job_id} "
                             f"(at {current['address']}); pick another name")
        _write_json_atomic(path, {"address": address, "pid": owner_pid})

    def lookup_name(self, name: str) -> str | None:
        data = _read_json(self.path / "names" / f"{name}.json")
        return data["address"] if data else None

    def unregister_name(self, name: str) -> None:
        (self.path / "names" / f"{name}.json").unlink(missing_ok=True)


def all_run_dirs(root: Path | None = None) -> list[RunDir]:
    root = root or runs_root()
    if not root.is_dir():
        return []
    return [RunDir(p) for p in sorted(root.iterdir()) if (p / "procs").is_dir()]


def _write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
