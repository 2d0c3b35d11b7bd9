"""Agents that join the head (launcher/join.py), with a real join desk on loopback and real
agent processes: a node joins, is refused when the head does not expect it or has it
already, waits for a head that comes up late, stops on the head's STOP, and ends by itself
when the head's heartbeats stop."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from rlmesh.launcher.join import JoinDesk, JoinedAgent, JoinRefused, join_head
from rlmesh.runtime.actor import ActorServer
from rlmesh.runtime.process import ActorStartError, ChildSpec
from rlmesh.runtime.run_dir import ProcessRecord, RunDir


async def desk_on(expected: list[str] | None, port: int = 0) -> tuple[JoinDesk, ActorServer, str]:
    desk = JoinDesk(expected)
    server = ActorServer(desk, "join-desk")
    address = await server.start(f"tcp://127.0.0.1:{port}")
    return desk, server, address


def record(name: str = "agent-a") -> ProcessRecord:
    return ProcessRecord(name=name, role="NodeAgent", pid=os.getpid(), create_time=time.time(),
                         control="tcp://127.0.0.1:9")


def agent_argv(node: str, join: str, runs_root: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "rlmesh.launcher.agent", node, "127.0.0.1", str(runs_root),
            "job", "-", "--join", join, *extra]


def test_refusals_name_the_node() -> None:
    async def main() -> None:
        desk, server, address = await desk_on(["a", "b"])
        try:
            await join_head(address, "a", record(), {}, timeout=10)
            assert set(desk.joined) == {"a"}
            with pytest.raises(JoinRefused, match="'c' is not one of this job's nodes"):
                await join_head(address, "c", record(), {}, timeout=10)
            with pytest.raises(JoinRefused, match="'a' has an agent already"):
                await join_head(address, "a", record(), {}, timeout=10)
            with pytest.raises(ActorStartError, match="node b did not join"):
                await desk.wait_for("b", 0.5)
        finally:
            server.close()
    asyncio.run(main())


def test_an_agent_waits_for_a_head_that_comes_late() -> None:
    async def main() -> None:
        import socket

        with socket.socket() as s:  # a free port, the head not listening on it yet
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        task = asyncio.ensure_future(join_head(f"tcp://127.0.0.1:{port}", "a", record(), {},
                                               timeout=30))
        await asyncio.sleep(2.5)
        assert not task.done()
        desk, server, _ = await desk_on(None, port)
        try:
            await asyncio.wait_for(task, 20)
            assert "a" in desk.joined
        finally:
            server.close()
    asyncio.run(main())


def test_no_head_is_one_line_after_the_timeout(runs_root: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = subprocess.run(agent_argv("a", f"tcp://127.0.0.1:{port}", runs_root, "--no-stdin"),
                          capture_output=True, text=True, timeout=60, start_new_session=True,
                          env={**os.environ, "RLMESH_JOIN_TIMEOUT_S": "3"})
    assert done.returncode == 1
    errors = [l for l in done.stderr.splitlines() if l.startswith("rlmesh agent: error:")]
    assert errors and "no head answered" in errors[0], done.stderr[-2000:]


def test_a_joined_agent_is_stopped_by_the_head_and_ends_without_it(runs_root: Path) -> None:
    """A real agent process joins; the head's JoinedAgent stops it (STOP on its control
    socket). A second one, never pinged after its join, ends by itself (its head silent).
    Each runs in a session of its own, as srun and a pod start it: an agent whose head is gone
    takes its whole process group down."""
    async def main() -> None:
        desk, server, address = await desk_on(["a", "b"])
        env = {**os.environ, "RLMESH_HEAD_SILENCE_S": "3"}
        first = subprocess.Popen(agent_argv("a", address, runs_root, "--no-stdin"), env=env,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
        second = subprocess.Popen(agent_argv("b", address, runs_root, "--no-stdin"), env=env,
                                  stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            run_dir = RunDir.create("head", runs_root)
            agent = JoinedAgent(ChildSpec(name="agent-a", cls_path="x:y", role="NodeAgent"),
                                run_dir, "a", desk, exit_code=first.poll)
            got = await agent.wait_ready(60)
            assert got.pid == first.pid and agent.poll() is None
            await desk.wait_for("b", 60)
            await agent.terminate(10)
            assert first.wait(20) == 0
            # Nobody pings b: it ends once the head has been silent for 3 s.
            assert second.wait(30) is not None
        finally:
            server.close()
            for p in (first, second):
                if p.poll() is None:
                    p.kill()
                    p.wait()
    asyncio.run(main())
    assert not [p for p in psutil.process_iter(["cmdline"])
                if "rlmesh.launcher.agent" in " ".join(p.info["cmdline"] or [])
                and str(runs_root) in " ".join(p.info["cmdline"] or [])]
