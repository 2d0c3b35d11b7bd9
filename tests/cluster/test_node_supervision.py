"""Supervision per node (issue 50): the head's supervisor pings the node agents and its own
local children, never an actor on another node; each agent pings its node's actors and
reports them in the head's poll. A remote actor that hangs (SIGSTOP) is reported by its agent
and killed and restarted by the head; a remote actor over its memory limit is killed and
restarted too (measured on its node); the head's heartbeat messages a second grow with the
nodes, not with the actors (12 on 3 nodes)."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

import numpy as np
import psutil
import pytest
import uvloop

from rlmesh.launcher.cluster_config import load_cluster
from rlmesh.launcher.remote import POLL_S
from rlmesh.launcher.session import ClusterSession
from rlmesh.runtime import Actor, ActorEvent, ActorUnavailable, Job, RestartPolicy
from tests.cluster.test_launch import cluster_file

pytestmark = pytest.mark.timeout(240)

WORK = "steps"  # the probe counter of Worker the restart policies count work in


class Worker(Actor):
    """Counts the work it is given in a probe (as an env runner counts env steps) and holds
    memory on demand."""

    def __init__(self) -> None:
        self.steps = 0
        self.held: list[np.ndarray] = []

    async def on_start(self) -> None:
        self.job.diagnostics.add_probe("worker", lambda: {WORK: self.steps})

    def work(self, steps: int) -> int:
        self.steps += steps
        return self.steps

    def hold(self, mb: int) -> int:
        block = np.ones(mb << 20, np.uint8)  # written: resident
        self.held.append(block)
        return len(self.held)

    def pid(self) -> int:
        return os.getpid()


def run_on_cluster(tmp: Path, cluster: Any, monkeypatch: Any,
                   body: Callable[[Job, ClusterSession], Awaitable[None]]) -> None:
    """``body(job, session)`` with an agent on every node of ``cluster``; everything taken
    down after, and nothing of the job left running on any node."""
    monkeypatch.setenv("RLMESH_CLUSTERS_DIR", str(tmp / "clusters"))
    config = load_cluster(cluster_file(tmp, cluster, stop={}))
    session = ClusterSession(config, echo=lambda line: None)

    async def main() -> None:
        job = await session.start()
        try:
            await body(job, session)
        finally:
            await session.shutdown()

    try:
        session.prepare()
        uvloop.run(main())
    finally:
        session.close()
        shutil.rmtree(Path.home() / ".rlmesh" / "clusters" / config.cluster_name,
                      ignore_errors=True)


async def wait_for(what: Callable[[], Any], timeout: float, message: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (got := what()):
        assert time.monotonic() < deadline, message
        await asyncio.sleep(0.1)
    return got


def test_the_head_pings_agents_and_local_children_only(tmp_path, netns_cluster, monkeypatch):
    """12 workers on 3 nodes and 1 on the head: the head's pings go to the 3 agents and the
    local worker; each remote worker's heartbeat and work counter reach the head through its
    agent's reports."""
    nodes = netns_cluster.names

    async def body(job: Job, session: ClusterSession) -> None:
        policy = RestartPolicy(max_restarts=1, work_key=WORK, max_crashes=3, crash_window=10**6)
        remote = [await job.spawn(Worker, name=f"worker-{i}", node=nodes[i % len(nodes)],
                                  restart=policy) for i in range(12)]
        local = await job.spawn(Worker, name="worker-local", restart=policy)
        for i, handle in enumerate(remote):
            assert await handle.call("work", i + 1) == i + 1
        assert await local.call("work", 7) == 7
        sups = job.supervisor.children
        assert all(sups[h.name].relayed for h in remote) and not sups["worker-local"].relayed

        def counters_in() -> bool:  # each remote worker's work, from its agent's reports
            return all(sups[h.name].budget.reported == i + 1 for i, h in enumerate(remote))
        await wait_for(counters_in, 20, "the remote workers' work counters did not arrive")
        start = job.supervisor.traffic()
        await asyncio.sleep(4)
        end = job.supervisor.traffic()

        agents = {f"agent-{n}" for n in nodes}
        assert set(end["by_child"]) == agents | {"worker-local"}, end["by_child"]
        assert not any(h.name in end["by_child"] for h in remote)
        assert end["relayed"] == 12
        seconds = end["seconds"] - start["seconds"]
        sent = {t: end["pings"][t]["messages"] - start["pings"].get(t, {}).get("messages", 0)
                for t in end["pings"]}
        # One ping a heartbeat interval to each agent and to the local child; none per actor.
        interval = job.heartbeat_interval
        assert 0 < sent["agents"] <= len(nodes) * (seconds / interval + 2), (sent, seconds)
        assert 0 < sent["local"] <= seconds / interval + 2, (sent, seconds)
        assert set(sent) == {"agents", "local"}
        # the agents' reports come in the polls the head makes of each agent anyway
        polls = end["polls"]["polls"] - start["polls"]["polls"]
        assert 0 < polls <= len(nodes) * (seconds / POLL_S + 2), (polls, seconds)
        assert end["reports"] > start["reports"]
        assert end["polls"]["entries"] >= end["reports"]
        # the heartbeat ages the head sees (rlmesh status) stay fresh through the reports
        now = time.monotonic()
        for handle in remote:
            assert now - sups[handle.name].watch.last_pong < job.heartbeat_timeout
        assert sups["worker-local"].budget.reported == 7  # its own pongs, as before

    run_on_cluster(tmp_path, netns_cluster, monkeypatch, body)


def test_a_stopped_remote_actor_is_reported_by_its_agent_and_restarted(tmp_path, netns_cluster,
                                                                       monkeypatch):
    node = netns_cluster.names[1]

    async def body(job: Job, session: ClusterSession) -> None:
        events: list[ActorEvent] = []
        job.supervisor.listeners.append(events.append)
        worker = await job.spawn(Worker, name="stuck", node=node,
                                 restart=RestartPolicy(max_restarts=1, backoff_s=0.1))
        pid = await worker.call("pid")
        assert job.supervisor.children["stuck"].child.record.pid == pid
        os.kill(pid, signal.SIGSTOP)  # namespaces of the network only: the pid is this one
        await wait_for(lambda: any(e.kind == "restarted" for e in events), 40,
                       f"no restart: {[(e.kind, e.detail) for e in events]}")
        [hung] = [e for e in events if e.kind == "hung"]
        assert hung.name == "stuck" and hung.cause == "heartbeat", hung
        # its stopped state, read by its agent on its node
        assert f"(pid {pid}) is stopped" in hung.detail and "SIGSTOP" in hung.detail, hung.detail
        await wait_for(lambda: not psutil.pid_exists(pid) or
                       psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, 10,
                       f"the stopped process {pid} was not killed")
        new_pid = await worker.call("pid")
        assert new_pid != pid
        assert session.links[node].children["stuck"].record.pid == new_pid  # on its node still
        assert "stuck" not in job.supervisor.traffic()["by_child"]  # never pinged by the head

    run_on_cluster(tmp_path, netns_cluster, monkeypatch, body)


def test_a_remote_actor_over_its_memory_limit_is_killed_and_restarted(tmp_path, netns_cluster,
                                                                      monkeypatch):
    """The head cannot read another machine's memory: the agent measures it on its node."""
    node = netns_cluster.names[2]

    async def body(job: Job, session: ClusterSession) -> None:
        events: list[ActorEvent] = []
        job.supervisor.listeners.append(events.append)
        probe = await job.spawn(Worker, name="probe", node=node)
        base_mb = psutil.Process(await probe.call("pid")).memory_info().rss / (1 << 20)
        await job.stop_actor("probe")
        limit = base_mb + 150
        worker = await job.spawn(Worker, name="greedy", node=node,
                                 restart=RestartPolicy(max_restarts=1, backoff_s=0.1,
                                                       max_memory_mb=limit))
        pid = await worker.call("pid")
        await wait_for(lambda: job.supervisor.children["greedy"].watch.status, 10,
                       "no report of the greedy worker")
        # Killed once its agent's next reading reaches the head: while it answers (the call
        # fails, saying why) or just after (its answer came first, on a loaded machine).
        try:
            await worker.call("hold", 300)
        except ActorUnavailable as exc:
            assert "over its memory limit" in str(exc), exc
        await wait_for(lambda: any(e.kind == "restarted" for e in events), 30,
                       f"no restart: {[(e.kind, e.detail) for e in events]}")
        [died] = [e for e in events if e.kind == "died"]
        assert died.cause.startswith("memory:") and "over its memory limit" in died.detail, died
        assert await worker.call("pid") != pid

    run_on_cluster(tmp_path, netns_cluster, monkeypatch, body)
