"""Shared fixtures: a private run-directory root per test, and a check that no process
the test started outlives it. Test hooks (calls only tests make, such as ``pid``) are served
throughout the suite: every actor process the tests start inherits RLMESH_TEST_HOOKS=1."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil
import pytest

from rlmesh.runtime.protocol import ENV_TEST_HOOKS

os.environ[ENV_TEST_HOOKS] = "1"  # set before any test builds an actor or starts a process


@pytest.fixture(autouse=True)
def runs_root(tmp_path_factory, monkeypatch):
    # Short path: ipc socket paths must stay under 108 bytes.
    root = tmp_path_factory.mktemp("r")
    monkeypatch.setenv("RLMESH_RUNS_ROOT", str(root))
    # Keys tcp policy servers make for themselves (and clients read): the test's own.
    monkeypatch.setenv("RLMESH_POLICY_SERVER_KEYS", str(root / "policy_server_keys"))
    return root


def rlmesh_processes(root: Path) -> list[psutil.Process]:
    """Live processes started for run directories under ``root``, wherever they were
    reparented: every actor process has its spec path, inside the run dir, in its argv."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if any(str(root) in arg for arg in p.info["cmdline"] or ()):
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


@pytest.fixture(autouse=True)
def no_orphans(runs_root):
    """Fail a test that leaves any actor process running (checked for up to 5 s)."""
    yield
    deadline = time.monotonic() + 5.0
    while (left := rlmesh_processes(runs_root)) and time.monotonic() < deadline:
        time.sleep(0.05)
    for p in left:
        p.kill()
    assert not left, f"processes left running after the test: {[p.info['cmdline'] for p in left]}"


@pytest.fixture
def no_children_left(runs_root):
    """Fail a test that leaves a child process of its own running (checked for up to 10 s):
    processes that are not actors, or actors that escaped the run directory, included."""
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    yield
    deadline = time.monotonic() + 10
    while True:
        left = []
        for p in me.children(recursive=True):
            try:
                if p.pid not in before and p.status() != psutil.STATUS_ZOMBIE:
                    left.append(p)
            except psutil.NoSuchProcess:
                pass
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not left, f"processes left behind: {[p.pid for p in left]}"
