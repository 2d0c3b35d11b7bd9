"""The per-job run directory: who runs where, named actors, logs, sockets, stack dumps.

Layout of ``<root>/<job_id>/``: ``procs/<name>.json`` (one per live process),
``names/<name>.json`` (named actors), ``logs/``, ``sock/`` (ipc endpoints), ``stacks/``.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

import psutil

ENV_RUN_DIR = "RLMESH_RUN_DIR"


def runs_root() -> Path:
    """Where run directories live; short, because ipc socket paths must stay < 108 bytes."""
    return Path(os.environ.get("RLMESH_RUNS_ROOT", f"/tmp/rlmesh-{os.getuid()}"))


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
        path = (root or runs_root()) / (job_id or new_job_id())
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
