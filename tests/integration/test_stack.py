"""``rlmesh stack`` against real actor processes: blocked loops, a GIL held in pure Python,
identical actors grouped, and pids that are not rlmesh processes."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from typing import Any, Awaitable, Callable

import psutil
import pytest
import uvloop

from rlmesh.runtime import Job

from .stack_actors import Idle, Sleeper, Spinner

pytestmark = pytest.mark.timeout(60)


# tests/conftest.py points $RLMESH_RUNS_ROOT at a fresh directory per test (the
# ``runs_root`` fixture); the CLI subprocess inherits it.


def rlmesh_stack(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rlmesh.cli.main", "stack", *args],
                          capture_output=True, text=True, timeout=30)


async def stack_of(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI off the event loop, so this test's own driver process stays responsive."""
    return await asyncio.to_thread(rlmesh_stack, *args)


def child_pids(job: Job) -> dict[str, int]:
    return {name: sup.child.pid for name, sup in job.supervisor.children.items()}


def assert_gone(pids: list[int], within: float = 2.0) -> None:
    deadline = time.monotonic() + within
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [p for p in pids if _alive(p)]
        time.sleep(0.05)
    assert not alive, f"actor processes left behind: {alive}"


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def run_job(scenario: Callable[[Job], Awaitable[None]]) -> None:
    """Run ``scenario`` with a fresh ipc job, shut it down, and check no actor survives."""
    pids: list[int] = []

    async def main() -> None:
        # Long heartbeat timeout: the supervisor must not kill the GIL-holding actor first.
        job = await Job("ipc", heartbeat_timeout=60).start()
        try:
            await scenario(job)
        finally:
            pids.extend(child_pids(job).values())
            await job.shutdown(grace=1)

    uvloop.run(main())
    assert pids, "the scenario started no actors"
    assert_gone(pids)


def entry_of(doc: dict[str, Any], pid: int) -> dict[str, Any]:
    [entry] = [e for e in doc["processes"] if e["pid"] == pid]
    return entry


def test_blocked_loop_is_flagged_with_the_blocking_frame(runs_root):
    async def scenario(job: Job) -> None:
        sleeper = await job.spawn(Sleeper)
        pid = child_pids(job)[sleeper.name]
        await sleeper.tell("block", 30)
        await asyncio.sleep(1.5)

        out = await stack_of("--json", "--job", job.job_id)
        assert out.returncode == 0, out.stderr
        doc = json.loads(out.stdout)
        entry = entry_of(doc, pid)
        assert entry["responded"] and entry["fallback"] is None
        assert entry["blocked"] is True and entry["blocked_for_s"] >= 1.0
        main = next(t for t in entry["threads"] if t["name"] == "MainThread")
        top = main["stack"][-1]
        assert top["func"] == "block" and "time.sleep" in top["code"], main["stack"][-3:]
        assert [c["method"] for c in entry["in_flight"]] == ["block"]
        [driver] = [e for e in doc["processes"] if e["role"] == "driver"]
        assert driver["blocked"] is False

        out = await stack_of("--job", job.job_id)
        assert out.returncode == 0, out.stderr
        section = out.stdout.split(f"{sleeper.name} (pid {pid})", 1)[1]
        assert re.match(r"\s+\[job [^\]]+\]\n\s+!! event loop blocked for \d+\.\d s", section), out.stdout
        assert "in flight: block (" in section
        assert out.stdout.count("!! event loop blocked") == 1  # the idle driver is not flagged

    run_job(scenario)


def test_gil_holder_is_dumped_through_faulthandler(runs_root):
    async def scenario(job: Job) -> None:
        spinner = await job.spawn(Spinner)
        pid = child_pids(job)[spinner.name]
        await spinner.tell("spin_holding_gil")
        await asyncio.sleep(1.0)

        out = await stack_of("--pid", str(pid), "--timeout", "1")
        assert out.returncode == 0, out.stderr
        assert f"{spinner.name} (pid {pid})" in out.stdout
        assert "!! control thread unresponsive (GIL held?)" in out.stdout
        dump = out.stdout.split("faulthandler dump (SIGUSR2", 1)[1]
        assert re.search(r'File ".*stack_actors\.py", line \d+ in spin_holding_gil', dump), out.stdout

        out = await stack_of("--pid", str(pid), "--timeout", "1", "--json")
        [entry] = json.loads(out.stdout)["processes"]
        assert entry["responded"] is False and entry["blocked"] is None
        assert "spin_holding_gil" in entry["fallback"]["faulthandler"]
        assert entry["fallback"]["reason"] == "control thread unresponsive (GIL held?)"

    run_job(scenario)


def test_identical_idle_actors_print_as_one_group(runs_root):
    async def scenario(job: Job) -> None:
        handles = [await job.spawn(Idle) for _ in range(3)]
        pids = child_pids(job)
        await asyncio.gather(*(h.call("ping") for h in handles))

        out = await stack_of("--job", job.job_id)
        assert out.returncode == 0, out.stderr
        members = ", ".join(f"{h.name} (pid {pids[h.name]})" for h in sorted(handles, key=lambda h: h.name))
        assert f"3 processes with the same stacks: {members}" in out.stdout, out.stdout
        idle_section = out.stdout.split("=== Idle (3) ===", 1)[1]
        assert idle_section.count("Thread MainThread") == 1
        assert "!!" not in out.stdout

    run_job(scenario)


def test_pid_of_a_non_rlmesh_process_is_a_clear_error(runs_root):
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        out = rlmesh_stack("--pid", str(other.pid))
    finally:
        other.kill()
        other.wait()
    assert out.returncode == 1
    assert f"pid {other.pid} (python" in out.stderr
    assert "is not an rlmesh process" in out.stderr
    assert out.stdout == ""

    out = rlmesh_stack("--pid", str(other.pid))  # now reaped: gone altogether
    assert out.returncode == 1 and f"pid {other.pid}: no such process" in out.stderr


def test_no_processes_is_exit_code_1_with_a_message(runs_root):
    out = rlmesh_stack()
    assert out.returncode == 1
    assert f"no live rlmesh processes found in {runs_root}" in out.stderr
