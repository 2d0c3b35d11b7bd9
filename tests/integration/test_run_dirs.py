"""Run directories (sockets, actor logs, stack dumps) do not pile up: a clean run removes its
own; a run that left something to read keeps it, the file its messages named included; a new
run sweeps dead runs' directories, keeping the newest RLMESH_KEEP_RUN_DIRS with something to
read, and never touches a live run's. 42 accumulated in an hour before (issue 48, point 8)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import uvloop

from rlmesh.runtime import Job, RestartPolicy

from .stack_actors import Idle

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("no_children_left")]


def test_a_clean_run_removes_its_run_directory(runs_root):
    async def main() -> Path:
        async with Job("ipc") as job:
            actor = await job.spawn(Idle)
            assert await actor.call("ping") == "pong"
            assert (job.run_dir.path / "sock").is_dir()
            return job.run_dir.path
    path = uvloop.run(main())
    assert not path.exists(), sorted(p.name for p in path.rglob("*"))


def test_a_run_whose_actor_died_keeps_the_log_its_message_named(runs_root):
    async def main() -> tuple[Path, str]:
        async with Job("ipc") as job:
            events = []
            job.supervisor.listeners.append(events.append)
            actor = await job.spawn(Idle, restart=RestartPolicy(max_restarts=0))
            os.kill(job.supervisor.children[actor.name].child.pid, signal.SIGKILL)
            deadline = time.monotonic() + 20
            while not any(e.kind == "died" for e in events):
                assert time.monotonic() < deadline, "no death seen"
                await asyncio_sleep()
            died = next(e for e in events if e.kind == "died")
            return job.run_dir.path, died.detail
    path, detail = uvloop.run(main())
    log = Path(detail.split("from ", 1)[1].split(":\n", 1)[0])
    assert log.exists() and log.is_relative_to(path), detail
    assert "died" in (path / "kept").read_text()


async def asyncio_sleep() -> None:
    import asyncio

    await asyncio.sleep(0.05)


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def fake_run_dir(root: Path, name: str, owner: tuple[int, float] | None, log: str = "",
                 age_s: float = 0.0) -> Path:
    """A run directory as a run leaves it: ``owner`` (pid, create time), a log's text."""
    path = root / name
    for sub in ("procs", "names", "logs", "sock", "stacks"):
        (path / sub).mkdir(parents=True)
    if owner is not None:
        (path / "owner.json").write_text(json.dumps({"pid": owner[0], "create_time": owner[1]}))
    (path / "logs" / "env_runner-1.log").write_text(log)
    then = time.time() - age_s
    for p in (path, path / "procs", path / "logs", path / "stacks"):
        os.utime(p, (then, then))
    return path


def test_a_new_run_sweeps_dead_runs_keeping_the_newest_with_something_to_read(runs_root,
                                                                            monkeypatch):
    monkeypatch.setenv("RLMESH_KEEP_RUN_DIRS", "2")
    dead = (dead_pid(), time.time() - 100)
    me = psutil.Process()
    empty = [fake_run_dir(runs_root, f"empty{i}", dead, age_s=10) for i in range(3)]
    failed = [fake_run_dir(runs_root, f"failed{i}", dead, "Traceback ...\n", age_s=100 - i)
              for i in range(4)]  # failed3 is the newest
    live = fake_run_dir(runs_root, "live", (me.pid, me.create_time()), age_s=1000)
    unowned_new = fake_run_dir(runs_root, "unowned_new", None, age_s=5)  # being made now?
    unowned_old = fake_run_dir(runs_root, "unowned_old", None, age_s=3600)  # an old rlmesh's

    async def main() -> Path:
        async with Job("ipc") as job:
            return job.run_dir.path
    uvloop.run(main())
    left = sorted(p.name for p in runs_root.iterdir())
    assert left == ["failed2", "failed3", "live", "unowned_new"], left
    assert not any(p.exists() for p in empty + failed[:2] + [unowned_old])
    assert (live / "logs").is_dir()


def test_a_bad_keep_count_is_one_line(runs_root, tmp_path):
    env = {**os.environ, "RLMESH_KEEP_RUN_DIRS": "lots"}
    run = subprocess.run([sys.executable, "-m", "rlmesh.cli.main", "train", "--run", "PPO",
                          "--env", "CartPole-v1", "--local-dir", str(tmp_path), "--stop",
                          '{"training_iteration": 1}'], capture_output=True, text=True,
                         timeout=120, env=env)
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert run.returncode == 2 and len(lines) == 1, run.stderr
    assert "RLMESH_KEEP_RUN_DIRS='lots' must be a whole number >= 0" in lines[0]
