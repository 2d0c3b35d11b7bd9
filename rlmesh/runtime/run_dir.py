"""The per-job run directory: who runs where, named actors, logs, sockets, stack dumps.

Layout of ``<root>/<job_id>/``: ``owner.json`` (the process that made it), ``procs/<name>.json``
(one per live process), ``names/<name>.json`` (named actors), ``logs/``, ``sock/`` (ipc
endpoints), ``stacks/``, ``kept`` (why it outlived its run).

Its lifetime: a run that ends cleanly removes its own; one that leaves something to read (a
log with output, a stack dump, a death its messages named) keeps it, and the next run on the
machine removes dead runs' directories, keeping the newest ``RLMESH_KEEP_RUN_DIRS`` of those
with something to read (42 piled up in an hour before).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import shutil
import stat
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Iterator

import psutil

ENV_RUN_DIR = "RLMESH_RUN_DIR"
OWNER = "owner.json"  # the process that made the directory: while it lives, nothing is swept
ENV_KEEP = "RLMESH_KEEP_RUN_DIRS"
#: Run directories of ended runs kept for a post-mortem when ENV_KEEP is not set.
DEFAULT_KEEP = 10
KEPT = "kept"  # why a directory outlived its run, written at its end
#: A directory without an owner file (made by an older rlmesh, or being made now) counts as
#: dead only once nothing wrote in it for this long.
UNOWNED_GRACE_S = 300.0
#: Supervisor events whose message names a file of the run directory (a log, a dump).
NAMING_EVENTS = ("died", "hung", "gave_up")

log = logging.getLogger(__name__)


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
        """A new run directory under the runs root, whose dead runs' directories go first
        (run_dir_sweep.sweep: kept ones only up to ``RLMESH_KEEP_RUN_DIRS``)."""
        root = check_runs_root(root or runs_root())
        sweep(root)
        path = root / (job_id or new_job_id())
        for sub in ("procs", "names", "logs", "sock", "stacks"):
            (path / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(path, 0o700)
        me = psutil.Process()
        _write_json_atomic(path / OWNER, {"pid": me.pid, "create_time": me.create_time()})
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


# --- lifetime ---



class BadKeepCount(ValueError):
    """``RLMESH_KEEP_RUN_DIRS`` is not a count (the CLI prints it in one line)."""


def keep_count() -> int:
    """``RLMESH_KEEP_RUN_DIRS``, checked: BadKeepCount, in one line, when it is no count."""
    text = os.environ.get(ENV_KEEP, "").strip()
    if not text:
        return DEFAULT_KEEP
    try:
        count = int(text)
    except ValueError:
        count = -1
    if count < 0:
        raise BadKeepCount(f"{ENV_KEEP}={text!r} must be a whole number >= 0: how many run "
                         f"directories of ended runs to keep for reading (default {DEFAULT_KEEP})")
    return count


def finish(run_dir: RunDir, event_kinds: Iterable[str]) -> None:
    """At the end of the run that made ``run_dir``: remove it, unless it holds something a
    user may be sent to read (then write why in ``kept``; ``sweep`` bounds how many stay)."""
    named = sorted({k for k in event_kinds if k in NAMING_EVENTS})
    reason = f"its supervisor reported {', '.join(named)}" if named else _output_in(run_dir.path)
    try:
        if reason:
            (run_dir.path / KEPT).write_text(reason + "\n")
        else:
            shutil.rmtree(run_dir.path)
    except OSError as exc:  # a run's end never fails over its scratch folder
        log.debug("run directory %s: %s", run_dir.path, exc)


def sweep(root: Path, keep: int | None = None) -> list[Path]:
    """Remove the directories of dead runs under ``root``: those holding nothing to read,
    and all but the newest ``keep`` (``keep_count()``) of the others. A directory whose
    owner or any recorded process lives is never touched. The removed paths."""
    keep = keep_count() if keep is None else keep
    empty, kept = [], []
    for path in _run_dirs(root):
        if not _dead(path):
            continue
        (kept if (path / KEPT).exists() or _output_in(path) else empty).append(path)
    kept.sort(key=_mtime, reverse=True)
    removed = []
    for path in empty + kept[keep:]:
        try:
            shutil.rmtree(path)
            removed.append(path)
        except OSError as exc:  # another run sweeping too, or a file of another user
            log.debug("could not remove %s: %s", path, exc)
    return removed


def _run_dirs(root: Path) -> list[Path]:
    try:
        return [p for p in root.iterdir() if (p / "procs").is_dir() and not p.is_symlink()]
    except OSError:
        return []


def _dead(path: Path) -> bool:
    """Whether no process of the run lives: its owner (``owner.json``) and every process
    record. Without an owner file, only after UNOWNED_GRACE_S without a write."""
    owner = _read_owner(path / OWNER)
    if owner is not None:
        if _alive(owner.get("pid"), owner.get("create_time")):
            return False
    elif time.time() - _mtime(path) < UNOWNED_GRACE_S:
        return False
    for record in RunDir(path).processes():
        if record.is_alive():
            return False
    return True


def _alive(pid: object, create_time: object) -> bool:
    if not isinstance(pid, int) or not isinstance(create_time, (int, float)):
        return False
    return ProcessRecord("", "", pid, float(create_time), "").is_alive()


def _output_in(path: Path) -> str:
    """What in a run directory is worth reading (a log that holds anything, a stack dump),
    in words, or "" for nothing."""
    for sub, what in (("logs", "a log"), ("stacks", "a stack dump")):
        try:
            for file in sorted((path / sub).iterdir()):
                if file.is_file() and file.stat().st_size > 0:
                    return f"{what} holds output: {file}"
        except OSError:
            continue
    return ""


def _mtime(path: Path) -> float:
    """When the run last wrote in its directory (the newest of it and its folders)."""
    times = []
    for p in (path, path / "procs", path / "logs", path / "stacks"):
        try:
            times.append(p.stat().st_mtime)
        except OSError:
            continue
    return max(times, default=0.0)


def _read_owner(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
