"""Runs one peer of the Atari benchmark (peer_*_atari.py) in its own venv and session, and
returns its JSON line; a peer that cannot run, fails or runs out of time comes back as
``{"peer": name, "error": "<one line>"}``. Nothing it started outlives it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from tests.benchmarks.children import popen

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "tests" / "benchmarks"
PEERS = ("cleanrl", "sample_factory", "rllib")
#: name -> (venv, script). The CleanRL peer runs in rlmesh's own venv (torch, ale-py; envpool
#: when installed): the interpreter running this.
SCRIPTS = {
    "cleanrl": (None, "peer_cleanrl_atari.py"),
    "sample_factory": (".venv-sf", "peer_sf_atari.py"),
    "rllib": (".venv-rllib", "peer_rllib_atari.py"),
}
LOG_DIR = Path(tempfile.gettempdir()) / "rlmesh-atari-peers"


class Family:
    """A peer's process and everything it starts: its descendants, noted while it runs (a
    daemon that leaves the session is still found), and whatever stays in its session."""

    def __init__(self, pid: int) -> None:
        self.sid = pid  # start_new_session: the peer leads its own session and group
        self.seen: dict[int, psutil.Process] = {}
        self.note()

    def note(self) -> None:
        try:
            root = psutil.Process(self.sid)
            for p in [root, *root.children(recursive=True)]:
                self.seen.setdefault(p.pid, p)
        except psutil.NoSuchProcess:
            pass

    def alive(self) -> list[psutil.Process]:
        procs = [p for p in self.seen.values() if _running(p)]  # the same process, not a reuse
        known = {p.pid for p in procs}
        for p in psutil.process_iter():
            try:
                if p.pid not in known and os.getsid(p.pid) == self.sid and _running(p):
                    procs.append(p)
            except (ProcessLookupError, PermissionError, psutil.Error):
                pass
        return procs

    def end(self, grace: float) -> None:
        """SIGTERM to all that are left and SIGKILL after ``grace`` seconds; SIGKILL at
        once when ``grace`` is 0."""
        procs = self.alive()
        if grace:
            _signal(procs, signal.SIGTERM)
            _, procs = psutil.wait_procs(procs, timeout=grace)
        _signal(procs, signal.SIGKILL)
        psutil.wait_procs(procs, timeout=5.0)


def _running(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _signal(procs: list[psutil.Process], sig: int) -> None:
    for p in procs:
        try:
            p.send_signal(sig)
        except psutil.Error:
            pass


def _last_line(path: Path) -> str:
    lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "no output"


def run_peer(name: str, steps: int, timeout: float) -> dict[str, Any]:
    """Runs peer ``name`` for ``steps`` env steps (agent steps), at most ``timeout`` seconds;
    its stderr goes to LOG_DIR/<name>.log."""
    if name not in SCRIPTS:
        return {"peer": name, "error": f"unknown peer; known: {', '.join(PEERS)}"}
    venv, script = SCRIPTS[name]
    python = Path(sys.executable) if venv is None else ROOT / venv / "bin" / "python"
    if venv is not None and not (ROOT / venv / ".installed").exists():
        return {"peer": name, "error": f"{venv} missing: make bench-peers"}
    LOG_DIR.mkdir(exist_ok=True)
    log = LOG_DIR / f"{name}.log"
    cmd = [str(python), str(HERE / script), "--steps", str(steps)]
    # The peer's temporary files (Sample Factory's train dir, ray's session) go in a folder
    # removed when it ends, killed or not; a short path: ray's sockets live under it.
    tmp = tempfile.mkdtemp(prefix="rlmesh-peer-")
    with open(log, "w") as err:
        proc = popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, cwd=ROOT,
                     start_new_session=True, env={**os.environ, "TMPDIR": tmp})
    family = Family(proc.pid)
    deadline = time.monotonic() + timeout
    out = ""
    try:
        while True:
            try:
                out, _ = proc.communicate(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                family.note()
                if time.monotonic() > deadline:
                    family.end(grace=0)
                    proc.communicate()
                    return {"peer": name, "error": f"timed out after {timeout:.0f} s "
                            f"(killed; its log: {log})"}
    finally:
        family.end(grace=5.0)  # a normal exit leaves nothing; a crash may leave workers
        shutil.rmtree(tmp, ignore_errors=True)
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if not lines:
        return {"peer": name, "error": f"exited {proc.returncode} without a result: "
                f"{_last_line(log)} (log: {log})"}
    return json.loads(lines[-1])
