"""Supervision per node without processes: what a node agent keeps of its actors' heartbeats
and tells the head (node_watch.py: small_status, ChildWatch), and how the head's supervisor
takes those reports (a RemoteChild of a link whose agent is gone, so that no call leaves)
through its usual decisions: hung -> killed and restarted, blocked, memory, the death
budget's work, with no ping of its own."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import pytest
import uvloop

from rlmesh.launcher.remote import NodeLink, RemoteChild
from rlmesh.runtime.node_watch import ChildWatch, small_status
from rlmesh.runtime.process import ChildSpec
from rlmesh.runtime.run_dir import ProcessRecord, RunDir
from rlmesh.runtime.supervisor import ActorEvent, RestartPolicy, Supervised, Supervisor, Watch


def pong_status(*, steps: int = 0, blocked: bool = False, since: float = 0.2,
                running_s: float | None = None) -> dict[str, Any]:
    """A pong's status as Diagnostics.status makes it (with a runner's probe)."""
    probe: dict[str, Any] = {"env_steps": steps, "busy": "env.step", "stats": {"messages": 40}}
    status = {"name": "r", "role": "EnvRunner", "pid": 42,
              "loop": {"loop_running": True, "since_last_tick_s": since, "blocked": blocked,
                       "lag_mean_s": 0.001, "lag_max_s": 0.01},
              "probes": {"runner": probe, "server": {"stats": {"messages": 9}}}}
    if running_s is not None:
        status["probes"]["update"] = {"work": "update 7", "running_s": running_s,
                                      "warn_after_s": 10.0, "median_s": 1.0}
    return status


# --- what the agent keeps and sends ---

def test_small_status_keeps_what_the_supervisor_reads_and_nothing_that_changes_without_news():
    small = small_status(pong_status(steps=120, since=0.3), "env_steps")
    assert small == {"pid": 42, "loop": {"loop_running": True, "blocked": False},
                     "probes": {"runner": {"env_steps": 120}}}
    # a free loop's tick age and the message counts change every pong: not news
    assert small_status(pong_status(steps=120, since=0.05), "env_steps") == small
    assert small_status(pong_status(steps=121), "env_steps") != small
    assert small_status(pong_status(steps=120), "") == {
        "pid": 42, "loop": {"loop_running": True, "blocked": False}, "probes": {}}


def test_small_status_of_a_blocked_loop_says_how_long_and_in_what():
    small = small_status(pong_status(blocked=True, since=7.04), "env_steps")
    assert small["loop"] == {"loop_running": True, "blocked": True, "since_last_tick_s": 7.0}
    assert small["probes"]["runner"] == {"env_steps": 0, "busy": "env.step"}


def test_small_status_keeps_a_unit_of_work_only_once_past_its_limit():
    assert "update" not in small_status(pong_status(running_s=9.0))["probes"]
    slow = small_status(pong_status(running_s=12.5))["probes"]["update"]
    assert slow == {"work": "update 7", "running_s": 12.5, "warn_after_s": 10.0, "median_s": 1.0}


def test_a_watch_pings_every_interval_and_confirms_a_silence_before_it_says_hung():
    watch = ChildWatch(42, interval=1.0, timeout=5.0, now=100.0, confirm_s=1.0)
    pings = [t for t in (100.0, 100.5, 101.0, 101.2, 102.0) if watch.step(t)]
    assert pings == [100.0, 101.0, 102.0]
    watch.pong(102.01, pong_status())
    assert watch.step(106.9) and not watch.hung  # due; 4.89 s without a pong: not late yet
    assert not watch.step(107.0) and not watch.hung
    assert watch.step(107.1)  # past the timeout: one more ping, to confirm
    assert not watch.step(107.5) and not watch.hung
    watch.step(108.2)
    assert watch.hung
    entry = watch.entry(108.2)
    assert entry["hung"] and entry["age"] == pytest.approx(6.19)
    watch.pong(108.3, pong_status())  # it answered after all (SIGCONT): not hung any more
    assert not watch.hung and "hung" not in watch.entry(108.3)


def test_a_pong_within_the_confirmation_keeps_it_from_being_hung():
    watch = ChildWatch(42, interval=1.0, timeout=5.0, now=0.0, confirm_s=1.0)
    assert watch.step(5.5)  # the confirming ping
    watch.pong(5.8, pong_status())
    watch.step(7.0)
    assert not watch.hung and watch.confirm_from is None


def test_an_entry_carries_the_status_and_memory_only_when_they_changed():
    watch = ChildWatch(42, now=0.0, work_key="env_steps")
    assert watch.entry(0.5) == {"pid": 42, "age": 0.5}  # no pong yet: nothing to tell
    watch.pong(1.0, pong_status(steps=10))
    first = watch.entry(1.2)
    assert first["status"]["probes"]["runner"] == {"env_steps": 10} and first["age"] == 0.2
    watch.pong(2.0, pong_status(steps=10, since=0.01))
    assert "status" not in watch.entry(2.1)  # the same small status
    watch.mb = 300.4
    assert watch.entry(2.2)["mb"] == 300.4
    watch.mb = 300.9
    assert "mb" not in watch.entry(2.3)  # under a megabyte of change
    watch.mb = 302.0
    assert watch.entry(2.4)["mb"] == 302.0


def test_the_heads_work_key_makes_the_counter_be_sent_again():
    watch = ChildWatch(42, now=0.0)
    watch.pong(0.1, pong_status(steps=5))
    assert watch.entry(0.2)["status"]["probes"] == {}
    watch.configure(0.5, 2.0, "env_steps", 1000.0)
    watch.pong(0.3, pong_status(steps=5))
    assert watch.entry(0.4)["status"]["probes"]["runner"] == {"env_steps": 5}
    assert (watch.watch.interval, watch.watch.timeout, watch.max_memory_mb) == (0.5, 2.0, 1000.0)


# --- what the head does with the reports ---

class Dead:
    """The agent handle of a link that is gone: nothing may be sent through it."""

    def call(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"a call left for a gone agent: {args}")


def remote_child(run_dir: RunDir, name: str = "r", pid: int = 42) -> tuple[NodeLink, RemoteChild]:
    link = NodeLink("node1", Dead(), lambda *a: None)
    link.alive = False  # its signals and calls are not sent: no agent here
    child = RemoteChild(ChildSpec(name=name, cls_path="x:Y", node="node1"), run_dir, link)
    child.record = ProcessRecord(name=name, role="EnvRunner", pid=pid, create_time=0.0,
                                 control="tcp://10.0.0.2:1")
    link.children[name] = child
    return link, child


def supervised(child: RemoteChild, policy: RestartPolicy | None = None) -> Supervised:
    sup = Supervised(child, policy or RestartPolicy(), Watch(1.0, 5.0), lambda *a: None)
    sup.connect_heartbeat(child.record.control)
    return sup


def test_a_report_sets_the_watch_the_budget_and_the_memory_and_no_ping_leaves(runs_root):
    _, child = remote_child(RunDir.create())
    sup = supervised(child, RestartPolicy(work_key="env_steps", max_memory_mb=500.0))
    assert sup.relayed and sup.ping_sock is None and not sup.watch.due(1e9)
    assert sup.ping(1e9) == 0
    assert not sup.take_report()  # none came
    child.watched(100.0, {"pid": 42, "age": 0.4,
                          "status": small_status(pong_status(steps=300), "env_steps"), "mb": 210.0})
    assert sup.take_report() and not sup.take_report()  # once per report
    assert sup.watch.last_pong == pytest.approx(99.6)
    assert sup.budget.reported == 300 and sup.reported_mb == 210.0
    assert not sup.watch.hung(1e9)  # a relayed child is hung when its agent says so only
    child.watched(101.0, {"pid": 42, "age": 6.1, "hung": True, "stopped": "stopped (state T)"})
    sup.take_report()
    assert sup.watch.hung(0.0) and sup.stopped == "stopped (state T)"
    assert sup.watch.status["probes"]["runner"] == {"env_steps": 300}  # kept: unchanged
    child.watched(102.0, {"pid": 42, "age": 0.1})
    sup.take_report()
    assert not sup.watch.hung(0.0) and sup.stopped is None


def test_the_link_applies_a_report_to_the_process_it_is_about_only(runs_root):
    link, child = remote_child(RunDir.create())
    assert link._child("r", 42) is child
    assert link._child("r", 41) is None  # the process it replaced: its late report is dropped
    assert link._child("other", 42) is None


def run_supervisor(sup: Supervised, until: Any, seconds: float = 5.0
                   ) -> tuple[Supervisor, list[ActorEvent], list[Supervised]]:
    """The supervisor's loop over ``sup`` until ``until(events)``; restarts recorded."""
    restarted: list[Supervised] = []
    events: list[ActorEvent] = []

    async def restart(s: Supervised) -> None:
        restarted.append(s)
        _, s.child = remote_child(s.child.run_dir, pid=43)
        s.connect_heartbeat(s.child.record.control)

    async def main() -> Supervisor:
        supervisor = Supervisor(restart, poll_s=0.01)
        supervisor.listeners.append(events.append)
        supervisor.children[sup.child.spec.name] = sup
        supervisor.start()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while not until(events) and loop.time() < deadline:
            await asyncio.sleep(0.01)
        supervisor.stop()
        return supervisor

    return uvloop.run(main()), events, restarted


def test_a_child_its_agent_says_is_hung_is_killed_and_restarted_without_a_ping(runs_root):
    _, child = remote_child(RunDir.create())
    sup = supervised(child, RestartPolicy(max_restarts=1, backoff_s=0.01))
    stopped = "stopped (state T, SIGSTOP or Ctrl-Z): kill -CONT 42 resumes it"
    child.watched(50.0, {"pid": 42, "age": 6.2, "hung": True, "stopped": stopped})
    supervisor, events, restarted = run_supervisor(
        sup, lambda ev: any(e.kind == "restarted" for e in ev))
    kinds = [e.kind for e in events]
    assert kinds == ["hung", "restarted"], [(e.kind, e.detail) for e in events]
    hung = events[0]
    assert hung.cause == "heartbeat" and "(pid 42) is stopped" in hung.detail
    assert "cannot dump its stacks" in hung.detail
    assert restarted == [sup] and sup.child.record.pid == 43 and not sup.watch.hung(0.0)
    traffic = supervisor.traffic()
    assert traffic["by_child"] == {} and traffic["pings"] == {} and traffic["relayed"] == 1
    assert traffic["reports"] >= 1


def test_a_blocked_loop_reported_by_the_agent_is_an_event(runs_root):
    _, child = remote_child(RunDir.create())
    sup = supervised(child)
    child.watched(1.0, {"pid": 42, "age": 0.1, "status": small_status(pong_status())})
    sup.take_report()  # its loop was seen running free first
    sup.seen_ticking = True
    child.watched(2.0, {"pid": 42, "age": 0.1,
                        "status": small_status(pong_status(blocked=True, since=8.0))})
    _, events, _ = run_supervisor(sup, lambda ev: ev)
    [blocked] = events
    assert blocked.kind == "blocked" and "blocked for 8.0 s in env.step" in blocked.detail


def test_memory_the_agent_measured_over_the_limit_kills_and_restarts_it(runs_root):
    _, child = remote_child(RunDir.create())
    sup = supervised(child, RestartPolicy(max_restarts=1, backoff_s=0.01, max_memory_mb=400.0))
    child.watched(1.0, {"pid": 42, "age": 0.1, "mb": 330.0})
    _, events, _ = run_supervisor(sup, lambda ev: ev)
    assert [e.kind for e in events] == ["memory"]  # a warning at 80 %, once
    child.watched(2.0, {"pid": 42, "age": 0.1, "mb": 420.0})
    _, events, restarted = run_supervisor(sup, lambda ev: any(e.kind == "restarted" for e in ev))
    assert [e.kind for e in events] == ["died", "restarted"]
    assert events[0].cause == "memory: 420 MB of 400 MB" and restarted == [sup]


def test_the_work_its_agent_read_at_its_end_counts_for_the_crash_window(runs_root):
    _, child = remote_child(RunDir.create())
    sup = supervised(child, RestartPolicy(max_restarts=5, backoff_s=0.01, work_key="env_steps",
                                          max_crashes=2, crash_window=1000))
    child.exited(-int(signal.SIGSEGV), ["Segmentation fault"], work=400)
    _, events, _ = run_supervisor(sup, lambda ev: any(e.kind == "restarted" for e in ev))
    assert events[0].kind == "died" and events[0].cause == "SIGSEGV"
    assert sup.budget.done == 400  # the last life's work, though no heartbeat carried it
