"""Watching child actors: exits, missed heartbeats, memory, slow work, and when to restart.

``RestartPolicy``, ``Watch`` (supervision_data.py) and child_limits.py hold the decisions
(no processes involved); the ``Supervisor`` task applies them to real children.

A child on another node (one whose process object says ``watched_on_node``: the launcher's
RemoteChild) is not pinged from here: its node's agent pings it on its own machine and
reports its heartbeat age, whether it is hung, its small status and its memory in the poll
the head makes of each agent (node_watch.py); ``Supervised.take_report`` puts those reports
into its ``Watch`` and the same decisions follow. The driver's heartbeat traffic is thus one
ping per agent and per local child (``Supervisor.traffic`` counts it), whatever the number
of actors on the nodes.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import signal
import time
from typing import Any, Awaitable, Callable

import psutil
import zmq

from ..wire import codec, messages as M
from ..wire.sockets import AsyncSocket, configure, connect
from .child_limits import WARN_AT, DeathBudget, MemoryGauge, cause_of
from .supervision_data import ActorEvent, RestartPolicy, Watch  # noqa: F401 (their home for callers)
from .diagnostics import DUMP_SIGNAL, stopped_state
from .process import ChildProcess, tail
from .work_clock import slow_units
from .work_counter import counter_path, take_count

log = logging.getLogger(__name__)


_ping_ids = itertools.count(1)


def _probe_sum(status: dict[str, Any], key: str) -> int | None:
    """The numbers ``key`` holds in a status's probes, summed; None when none holds one."""
    values = [p.get(key) for p in (status.get("probes") or {}).values() if isinstance(p, dict)]
    numbers = [int(v) for v in values if isinstance(v, (int, float))]
    return sum(numbers) if key and numbers else None


class Supervised:
    """A child under supervision: process, heartbeat socket, restart count."""

    def __init__(self, child: ChildProcess, policy: RestartPolicy, watch: Watch,
                 on_dead: Callable[[str, bool], None], start_timeout: float = 60.0) -> None:
        self.child = child
        self.policy = policy
        self.start_timeout = start_timeout  # for restarts, as for the first start
        self.watch = watch
        self.on_dead = on_dead  # (reason, permanent) -> None: fails the handles' calls
        self.restarts = 0
        self.failures_in_a_row = 0  # since the actor last ran healthy_after_s
        self.started_at = time.monotonic()
        self.ping_sock: AsyncSocket | None = None
        self.restarting = False
        self.blocked = False  # a blocked loop was reported for the current spell
        self.seen_ticking = False  # its loop was seen running free since it (re)started
        self.budget = DeathBudget(policy.max_crashes, policy.crash_window)
        self.causes: list[str] = []  # of its deaths, in order
        self.gauge: MemoryGauge | None = None  # with max_memory_mb, for the current life
        self.memory_warned = False  # this life
        self.slow_reported: set[str] = set()  # units of work reported slow
        self.dump_logged = False  # the last output of one death went to the log (detail)
        self.reported_mb: float | None = None  # memory its node's agent measured, not yet applied
        self.stopped: str | None = None  # its stopped state, as its node's agent read it

    @property
    def relayed(self) -> bool:
        """Its heartbeat is kept by its node's agent (node_watch.py), not by pings from here."""
        return bool(getattr(self.child, "watched_on_node", False))

    def connect_heartbeat(self, control_address: str) -> None:
        self.close_heartbeat()
        self.watch.last_pong = time.monotonic()
        self.watch.status = {}  # a previous process's status says nothing of this one
        self.watch.relayed, self.watch.reported_hung = self.relayed, False
        self.gauge, self.memory_warned = None, False
        self.reported_mb, self.stopped = None, None
        if self.relayed:  # its agent pings it, with our numbers
            self.child.watch_on_node(self.watch.interval, self.watch.timeout,
                                     self.policy.work_key, self.policy.max_memory_mb)
            return
        sock = configure(zmq.Context.instance().socket(zmq.DEALER), 1 << 20, hwm=10)
        connect(sock, control_address)
        self.ping_sock = AsyncSocket(sock, self._on_pong)
        if self.policy.max_memory_mb > 0 and getattr(self.child, "popen", None) is not None:
            try:  # children on other nodes are not measured from here
                self.gauge = MemoryGauge(self.child.pid)
            except psutil.Error:  # dead already: the next poll sees it
                pass

    def _on_pong(self, frames: list[Any]) -> None:
        try:
            msg = M.validate(codec.decode(frames, codec.Limits.with_max(1 << 20)))
        except (codec.DecodeError, M.ProtocolError):
            return
        if msg["t"] == M.PONG:
            self.watch.pong(time.monotonic(), msg["status"])
            work = _probe_sum(msg["status"], self.policy.work_key)
            if work is not None:
                self.budget.report(work)

    def take_report(self) -> bool:
        """Apply its node agent's latest report (RemoteChild.take_report, node_watch's
        ChildWatch.entry) to its Watch, its death budget and its memory reading, as a pong
        and a memory reading here would be; False when none came since the last call."""
        report = self.child.take_report()
        if report is None:
            return False
        self.watch.last_pong = report["at"] - float(report.get("age", 0.0))
        if "status" in report:
            self.watch.status = report["status"]
            work = _probe_sum(report["status"], self.policy.work_key)
            if work is not None:
                self.budget.report(work)
        self.watch.reported_hung = bool(report.get("hung"))
        self.stopped = report.get("stopped")
        if "mb" in report:
            self.reported_mb = float(report["mb"])
        return True

    def ping(self, now: float) -> int:
        """Send a ping; the bytes sent (0: no socket, as for a child its agent pings)."""
        if self.ping_sock is None:
            return 0
        self.watch.last_ping = now
        frames = codec.encode(M.make(M.PING, id=next(_ping_ids)))
        self.ping_sock.send_nowait(frames)
        return sum(len(f) for f in frames)

    def close_heartbeat(self) -> None:
        if self.ping_sock is not None:
            self.ping_sock.close()
            self.ping_sock = None


class Supervisor:
    """Polls children for exits and missed heartbeats; restarts them per policy."""

    def __init__(self, restart: Callable[[Supervised], Awaitable[None]], poll_s: float = 0.1,
                 blocked_warn_s: float = 5.0, confirm_s: float = 1.0) -> None:
        # A loop stuck this long is reported: longer than any sane unit of work between two
        # awaits (a fragment of a slow env), far shorter than a call's timeout.
        self.blocked_warn_s = blocked_warn_s
        self.children: dict[str, Supervised] = {}
        self.events: list[ActorEvent] = []
        self.listeners: list[Callable[[ActorEvent], None]] = []
        self._restart = restart
        self._poll_s = poll_s
        self.confirm_s = confirm_s
        self._task: asyncio.Task[None] | None = None
        # This process's own status (its diagnostics'), checked for slow work as a child's
        # is: a learner in the driver process. Set by the job.
        self.own_status: Callable[[], dict[str, Any]] | None = None
        self._own_slow: set[str] = set()
        self._own_checked = 0.0
        # Supervision traffic (traffic()): pings sent, by child and by target, and the
        # counters of the polls that bring the agents' reports (a NodeLink's traffic()).
        self.pings_by_child: dict[str, int] = {}
        self._sent: dict[str, list[int]] = {}  # target -> [pings, bytes]
        self.reports_applied = 0
        self.traffic_sources: list[Callable[[], dict[str, int]]] = []
        self._counting_since = time.monotonic()

    def start(self) -> None:
        self._counting_since = time.monotonic()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="rlmesh.supervisor")

    def _ping(self, sup: Supervised, now: float) -> None:
        sent = sup.ping(now)
        if not sent:
            return
        name = sup.child.spec.name
        self.pings_by_child[name] = self.pings_by_child.get(name, 0) + 1
        # A node agent's heartbeat is the node's; any other child pinged is on this machine.
        target = "agents" if sup.child.spec.role == "NodeAgent" else "local"
        counts = self._sent.setdefault(target, [0, 0])
        counts[0] += 1
        counts[1] += sent

    def traffic(self) -> dict[str, Any]:
        """The supervision traffic this process sent since the supervisor started: per
        target (``agents``: node agents, ``local``: children on this machine) the pings, their
        bytes and both per second; ``by_child``: pings per child name (a child its node's
        agent watches gets none); ``polls``: the polls of the agents that carry their
        children's heartbeats (count, bytes of the replies, child entries) and ``reports``:
        those entries applied here; ``relayed``: how many children are watched that way."""
        seconds = max(1e-9, time.monotonic() - self._counting_since)
        pings = {target: {"messages": n, "bytes": b, "per_s": round(n / seconds, 3),
                          "bytes_per_s": round(b / seconds, 1)}
                 for target, (n, b) in sorted(self._sent.items())}
        polls = {"polls": 0, "bytes": 0, "entries": 0}
        for source in self.traffic_sources:
            for key, value in source().items():
                polls[key] = polls.get(key, 0) + value
        polls["per_s"] = round(polls["polls"] / seconds, 3)
        polls["bytes_per_s"] = round(polls["bytes"] / seconds, 1)
        return {"seconds": round(seconds, 3), "pings": pings, "by_child": dict(self.pings_by_child),
                "polls": polls, "reports": self.reports_applied,
                "relayed": sum(1 for s in self.children.values() if s.relayed)}

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for sup in self.children.values():
            sup.close_heartbeat()

    def add_work(self, name: str, amount: int) -> None:
        """Work child ``name`` did, as its owner counted it (the env steps of the fragments a
        runner delivered), for its ``crash_window``."""
        sup = self.children.get(name)
        if sup is not None:
            sup.budget.add(amount)

    def emit(self, event: ActorEvent, line: str | None = None) -> None:
        """Record ``event``, tell the listeners, and log one line (``line``, default the
        detail's first): a death's last output stays in the child's log file (once in this
        process's log too, off the console: ``detail``), as 19 crash dumps in 100 s
        buried the console."""
        self.events.append(event)
        del self.events[:-1000]
        # Given up for its deaths: its last death's line said so, its owner says what follows.
        quiet = event.kind == "restarted" or (event.kind == "gave_up" and event.cause == "crashes")
        level = logging.INFO if quiet else logging.WARNING
        log.log(level, "%s %s: %s", event.name, event.kind, line or event.detail.splitlines()[0])
        sup = self.children.get(event.name)
        rest = event.detail.splitlines()[1:] or event.last_lines
        if rest and sup is not None and not sup.dump_logged:
            sup.dump_logged = True
            log.log(level, "%s %s: %s\n%s", event.name, event.kind, event.detail.splitlines()[0],
                    "\n".join(rest), extra={"detail": True})
        for fn in self.listeners:
            fn(event)

    async def _run(self) -> None:
        while True:
            now = time.monotonic()
            for sup in list(self.children.values()):
                if sup.restarting:
                    continue
                code = sup.child.poll()
                if code is not None:
                    self._lost(sup, "died", sup.child.describe_exit("died"), code)
                    continue
                if sup.relayed and sup.take_report():
                    self.reports_applied += 1
                if sup.watch.hung(now):
                    sup.restarting = True  # not polled while we take its stacks
                    asyncio.get_running_loop().create_task(self._dump_and_kill(sup, now))
                else:
                    self._check_blocked(sup)
                    self._check_slow(sup.child.spec.name, sup.watch.status, sup.slow_reported)
                    if sup.gauge is not None and now >= sup.gauge.next_at:
                        self._check_memory(sup, now)
                    elif sup.reported_mb is not None:
                        mb, sup.reported_mb = sup.reported_mb, None
                        self._apply_memory(sup, mb)
                    if sup.watch.due(now):
                        self._ping(sup, now)
            if self.own_status is not None and now - self._own_checked >= 1.0:
                self._own_checked = now
                self._check_slow("", self.own_status(), self._own_slow)
            await asyncio.sleep(self._poll_s)

    async def _dump_and_kill(self, sup: Supervised, now: float) -> None:
        """A hung actor's stacks go into the event before it is killed: the reason it hung.
        First one more ping and ``confirm_s`` to answer it: a pong may already wait in our
        socket unread, when it is this process that was too busy (a learner thread holding
        the GIL, an overloaded machine), and a live actor is not killed for that."""
        if not sup.relayed:  # its node's agent confirmed it already, with its own ping
            last_pong = sup.watch.last_pong
            self._ping(sup, time.monotonic())
            await asyncio.sleep(self.confirm_s)
            if sup.watch.last_pong != last_pong:
                log.warning("%s answered a heartbeat %.1f s late; not killed (a busy machine "
                            "or a busy supervising process)", sup.child.spec.name,
                            sup.watch.last_pong - last_pong)
                sup.restarting = False
                return
        child = sup.child
        dump = child.run_dir.stack_dump_path(child.spec.name, child.pid)
        # It could not dump: the file would stay empty. On another node, its agent read it
        # (the dump file is that node's: none is read here).
        stopped = sup.stopped if sup.relayed else stopped_state(child.pid)
        before = (dump.stat().st_size if not sup.relayed and dump.exists() and stopped is None
                  else None)
        if before is not None:  # without the handler, the signal would just kill it
            child.signal(DUMP_SIGNAL)
            await asyncio.sleep(0.5)
        child.kill()
        silent = f"{time.monotonic() - sup.watch.last_pong:.1f} s"
        detail = (f"actor {child.spec.name!r} (pid {child.pid}) is {stopped}, so it sent no "
                  f"heartbeat for {silent} and cannot dump its stacks; killed" if stopped else
                  f"actor {child.spec.name!r} sent no heartbeat for {silent}; killed")
        lines = []
        if before is not None and dump.exists():
            with open(dump, errors="replace") as fh:
                fh.seek(before)
                lines = fh.read().splitlines()
        if lines:
            detail += f"; its stacks when it hung are in {dump}"
        sup.restarting = False
        self._lost(sup, "hung", detail, child.poll(), lines or None)

    def _lost(self, sup: Supervised, kind: str, detail: str, code: int | None,
              lines: list[str] | None = None, cause: str = "") -> None:
        name = sup.child.spec.name
        sup.close_heartbeat()
        sup.child.signal_group(signal.SIGKILL)  # nothing of the dead actor's group stays behind
        sup.child.cleanup()
        if time.monotonic() - sup.started_at >= sup.policy.healthy_after_s:
            sup.failures_in_a_row = 0
        delay = sup.policy.delay(sup.restarts, sup.failures_in_a_row)
        sup.failures_in_a_row += 1
        cause = cause or ("heartbeat" if kind == "hung" else cause_of(code))
        sup.causes.append(cause)
        if sup.policy.work_key:  # what it counted up to its end, where its crash left it
            work = take_count(counter_path(sup.child.run_dir.path, name, sup.policy.work_key))
            if work is None:  # on another node, its agent read it
                work = getattr(sup.child, "final_work", None)
            if work is not None:
                sup.budget.report(work)
        spent = sup.budget.died()  # not None: too many deaths within its work window
        event = ActorEvent(kind, name, detail, code,
                           tail(sup.child.log_path) if lines is None else lines, cause=cause)
        self.emit(event, self._death_line(sup, detail, None if spent is not None else delay))
        sup.on_dead(detail.splitlines()[0], delay is None or spent is not None)
        if spent is not None or delay is None:
            del self.children[name]
            self.emit(self._gave_up(sup, code, spent))
            return
        sup.restarting = True
        asyncio.get_running_loop().create_task(self._restart_later(sup, delay))

    def _death_line(self, sup: Supervised, detail: str, delay: float | None) -> str:
        """One short line for the console: how, what next, where its output is."""
        policy = sup.policy
        head = detail.splitlines()[0]
        if "; last output, from" in head:  # describe_exit's: its cause is all the line needs
            code = sup.child.poll()
            killed = code is not None and code < 0
            head = f"killed by {sup.causes[-1]}" if killed else sup.causes[-1]
        line = head + ("; not restarted" if delay is None else f"; restarting in {delay:g} s")
        if policy.max_crashes:
            line += (f" (death {min(len(sup.causes), policy.max_crashes)} of {policy.max_crashes}"
                     f" allowed within {policy.crash_window:,} {policy.work_key or 'work'})")
        return f"{line}; its output: {sup.child.log_path}"

    def _gave_up(self, sup: Supervised, code: int | None, spent: int | None) -> ActorEvent:
        name, policy = sup.child.spec.name, sup.policy
        if spent is None:
            return ActorEvent("gave_up", name, f"not restarting {name!r}: {sup.restarts} "
                              f"restarts of {policy.max_restarts} allowed", code, cause="restarts")
        detail, facts = sup.budget.verdict(name, spent, sup.causes, policy.work_key)
        return ActorEvent("gave_up", name, detail, code, cause="crashes",
                          facts={**facts, "log": str(sup.child.log_path)})

    def _check_memory(self, sup: Supervised, now: float) -> None:
        """Warn once a life at WARN_AT of its memory limit; at the limit, kill it: it is
        restarted (and counted) as a child that died, before it takes the machine's memory."""
        assert sup.gauge is not None
        mb = sup.gauge.rss_mb(now)
        if mb is None:
            return  # gone: the next poll sees its exit
        sup.gauge.schedule(now, sup.policy.max_memory_mb, self._poll_s)
        self._apply_memory(sup, mb)

    def _apply_memory(self, sup: Supervised, mb: float) -> None:
        """The memory decision on a reading (here, or by the child's node agent)."""
        limit = sup.policy.max_memory_mb
        if limit <= 0:
            return
        name, what = sup.child.spec.name, sup.policy.memory_limit_name
        if mb >= limit:
            sup.child.kill()
            self._lost(sup, "died", f"actor {name!r} held {mb:,.0f} MB (RSS, with its child "
                       f"processes), over {what} ({limit:,.0f} MB); killed", sup.child.poll(),
                       cause=f"memory: {mb:,.0f} MB of {limit:,.0f} MB")
        elif mb >= WARN_AT * limit and not sup.memory_warned:
            sup.memory_warned = True
            self.emit(ActorEvent("memory", name, f"holds {mb:,.0f} MB (RSS, with its child "
                                 f"processes): {mb / limit:.0%} of {what} ({limit:,.0f} MB); at "
                                 "the limit it is killed and restarted"))

    def _check_slow(self, name: str, status: dict[str, Any], reported: set[str]) -> None:
        """A ``slow`` event once per unit of work past its limit (work_clock.py)."""
        for key, detail in slow_units(status, reported):
            self.emit(ActorEvent("slow", name or key, detail))

    async def _restart_later(self, sup: Supervised, delay: float) -> None:
        await asyncio.sleep(delay)
        sup.restarts += 1
        try:
            await self._restart(sup)
        except Exception as exc:
            log.error("restart of %s failed: %s", sup.child.spec.name, exc)
            sup.restarting = False  # the next poll sees the exit and applies the policy
            return
        sup.restarting = False
        sup.started_at = time.monotonic()
        sup.blocked = sup.seen_ticking = False
        self.emit(ActorEvent("restarted", sup.child.spec.name,
                             f"restart {sup.restarts} of {sup.policy.max_restarts} "
                             f"after a backoff of {delay:g} s"))

    def _check_blocked(self, sup: Supervised) -> None:
        """A ``blocked`` event once per spell in which the child's event loop stopped ticking
        while its control thread still answers (user code stuck: an env's step, a callback),
        with what the child says it is busy with (a probe's ``busy``), long before a call to
        it times out."""
        status = sup.watch.status
        loop = status.get("loop") or {}
        if not loop.get("blocked") or loop.get("since_last_tick_s", 0) < self.blocked_warn_s:
            sup.blocked = False
            sup.seen_ticking = sup.seen_ticking or bool(loop.get("loop_running"))
            return
        if sup.blocked or not sup.seen_ticking:  # not yet: an actor still starting (imports)
            return
        sup.blocked = True
        busy = [p["busy"] for p in (status.get("probes") or {}).values()
                if isinstance(p, dict) and p.get("busy")]
        detail = f"its event loop has been blocked for {loop.get('since_last_tick_s', 0):.1f} s"
        if busy:
            detail += f" in {'; '.join(map(str, busy))}"
        self.emit(ActorEvent("blocked", sup.child.spec.name, detail))
