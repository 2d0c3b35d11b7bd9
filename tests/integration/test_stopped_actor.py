"""A stopped actor (SIGSTOP, state T) cannot answer a heartbeat nor dump its own stacks: what
the supervisor and ``rlmesh stack`` say of it must be true. The supervisor's warning pointed
to a stack file that stayed empty (issue 48, point 8)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

import pytest
import uvloop

from rlmesh.runtime import Job, RestartPolicy

from .stack_actors import Idle
from .test_runtime import _wait_for

pytestmark = pytest.mark.timeout(60)


def test_the_supervisor_says_a_stopped_actor_is_stopped_and_names_no_empty_stack_file():
    async def main():
        async with Job("ipc", heartbeat_interval=0.2, heartbeat_timeout=1.5) as job:
            events = []
            job.supervisor.listeners.append(events.append)
            actor = await job.spawn(Idle, restart=RestartPolicy(max_restarts=1, backoff_s=0.1))
            pid = job.supervisor.children[actor.name].child.pid
            os.kill(pid, signal.SIGSTOP)
            await _wait_for(lambda: any(e.kind == "restarted" for e in events), timeout=20)
            [hung] = [e for e in events if e.kind == "hung"]
            assert f"(pid {pid}) is stopped" in hung.detail and "SIGSTOP" in hung.detail, hung.detail
            assert "cannot dump its stacks" in hung.detail, hung.detail
            for word in hung.detail.split():  # any file it names holds what it says
                if word.rstrip(";.,").endswith(".txt"):
                    assert os.path.getsize(word.rstrip(";.,")) > 0, hung.detail
            assert await actor.call("ping") == "pong"  # restarted
    uvloop.run(main())


def test_rlmesh_stack_says_a_stopped_process_is_stopped_and_how_to_resume_it():
    async def main():
        async with Job("ipc", heartbeat_timeout=60) as job:
            actor = await job.spawn(Idle)
            pid = job.supervisor.children[actor.name].child.pid
            os.kill(pid, signal.SIGSTOP)
            try:
                out = await asyncio.to_thread(
                    subprocess.run, [sys.executable, "-m", "rlmesh.cli.main", "stack", "--pid",
                                     str(pid), "--timeout", "1"],
                    capture_output=True, text=True, timeout=30)
            finally:
                os.kill(pid, signal.SIGCONT)
            assert out.returncode == 0, out.stderr
            assert f"!! stopped (state T, SIGSTOP or Ctrl-Z): kill -CONT {pid} resumes it" in out.stdout, out.stdout
            assert "no faulthandler dump appeared" not in out.stdout, out.stdout
            assert await actor.call("ping") == "pong"  # it was never signalled to dump or die
    uvloop.run(main())
