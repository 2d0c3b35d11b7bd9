"""Watching child actors: exits, missed heartbeats, and when to restart.

``RestartPolicy`` and ``Watch`` hold the decisions (no processes involved); the
``Supervisor`` task applies them to real children.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import signal
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import zmq

from ..wire import codec, messages as M
from ..wire.sockets import AsyncSocket, configure, connect
from .diagnostics import DUMP_SIGNAL, stopped_state
from .process import ChildProcess, tail

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RestartPolicy:
    """How often a dead actor is started again, and how long to wait before each try."""

    max_restarts: int = 0
    backoff_s: float = 0.5
    backoff_max_s: float = 30.0
    multiplier: float = 2.0
    # An actor that ran this long since its last start was healthy: its next failure waits
    # backoff_s again (without it, seven failures spread over a day made every later one
    # stall sampling for backoff_max_s).
    healthy_after_s: float = 60.0

    def delay(self, restarts_so_far: int, failures_in_a_row: int | None = None) -> float | None:
        """Seconds to wait before the next restart, or None to give up. ``restarts_so_far``
        counts against ``max_restarts``; the backoff grows with ``failures_in_a_row``
        (failures since the actor last ran ``healthy_after_s``; default: every restart)."""
        if restarts_so_far >= self.max_restarts:
            return None
        streak = restarts_so_far if failures_in_a_row is None else failures_in_a_row
        try:
            return min(self.backoff_max_s, self.backoff_s * self.multiplier ** streak)
        except OverflowError:  # after ~1000 restarts of a policy meant to go on for ever
            return self.backoff_max_s


@dataclass
class ActorEvent:
    """Something the supervisor saw: ``died``, ``hung``, ``blocked`` (loop stuck, process
    answering), ``restarted`` or ``gave_up``."""

    kind: str
    name: str
    detail: str
    exit_code: int | None = None
    last_lines: list[str] = field(default_factory=list)
    time: float = field(default_factory=time.time)


@dataclass
class Watch:
    """Heartbeat bookkeeping for one child."""

    interval: float
    timeout: float
    last_pong: float = field(default_factory=time.monotonic)
    last_ping: float = 0.0
    status: dict[str, Any] = field(default_factory=dict)

    def due(self, now: float) -> bool:
        return now - self.last_ping >= self.interval

    def hung(self, now: float) -> bool:
        return now - self.last_pong > self.timeout

    def pong(self, now: float, status: dict[str, Any]) -> None:
        self.last_pong = now
        self.status = status


_ping_ids = itertools.count(1)


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

    def connect_heartbeat(self, control_address: str) -> None:
        self.close_heartbeat()
        sock = configure(zmq.Context.instance().socket(zmq.DEALER), 1 << 20, hwm=10)
        connect(sock, control_address)
        self.ping_sock = AsyncSocket(sock, self._on_pong)
        self.watch.last_pong = time.monotonic()
        self.watch.status = {}  # a previous process's status says nothing of this one

    def _on_pong(self, frames: list[Any]) -> None:
        try:
            msg = M.validate(codec.decode(frames, codec.Limits.with_max(1 << 20)))
        except (codec.DecodeError, M.ProtocolError):
            return
        if msg["t"] == M.PONG:
            self.watch.pong(time.monotonic(), msg["status"])

    def ping(self, now: float) -> None:
        if self.ping_sock is not None:
            self.watch.last_ping = now
            self.ping_sock.send_nowait(codec.encode(M.make(M.PING, id=next(_ping_ids))))

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

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="rlmesh.supervisor")

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for sup in self.children.values():
            sup.close_heartbeat()

    def emit(self, event: ActorEvent) -> None:
        self.events.append(event)
        del self.events[:-1000]
        level = logging.INFO if event.kind == "restarted" else logging.WARNING
        log.log(level, "%s %s: %s", event.name, event.kind, event.detail)
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
                elif sup.watch.hung(now):
                    sup.restarting = True  # not polled while we take its stacks
                    asyncio.get_running_loop().create_task(self._dump_and_kill(sup, now))
                else:
                    self._check_blocked(sup)
                    if sup.watch.due(now):
                        sup.ping(now)
            await asyncio.sleep(self._poll_s)

    async def _dump_and_kill(self, sup: Supervised, now: float) -> None:
        """A hung actor's stacks go into the event before it is killed: the reason it hung.
        First one more ping and ``confirm_s`` to answer it: a pong may already wait in our
        socket unread, when it is this process that was too busy (a learner thread holding
        the GIL, an overloaded machine), and a live actor is not killed for that."""
        last_pong = sup.watch.last_pong
        sup.ping(time.monotonic())
        await asyncio.sleep(self.confirm_s)
        if sup.watch.last_pong != last_pong:
            log.warning("%s answered a heartbeat %.1f s late; not killed (a busy machine or "
                        "a busy supervising process)", sup.child.spec.name,
                        sup.watch.last_pong - last_pong)
            sup.restarting = False
            return
        child = sup.child
        dump = child.run_dir.stack_dump_path(child.spec.name, child.pid)
        stopped = stopped_state(child.pid)  # it could not dump: the file would stay empty
        before = dump.stat().st_size if dump.exists() and stopped is None else None
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
              lines: list[str] | None = None) -> None:
        name = sup.child.spec.name
        sup.close_heartbeat()
        sup.child.signal_group(signal.SIGKILL)  # nothing of the dead actor's group stays behind
        sup.child.cleanup()
        if time.monotonic() - sup.started_at >= sup.policy.healthy_after_s:
            sup.failures_in_a_row = 0
        delay = sup.policy.delay(sup.restarts, sup.failures_in_a_row)
        sup.failures_in_a_row += 1
        self.emit(ActorEvent(kind, name, detail, code,
                             tail(sup.child.log_path) if lines is None else lines))
        sup.on_dead(detail.splitlines()[0], delay is None)
        if delay is None:
            del self.children[name]
            self.emit(ActorEvent("gave_up", name,
                                 f"not restarting {name!r}: {sup.restarts} restarts of "
                                 f"{sup.policy.max_restarts} allowed", code))
            return
        sup.restarting = True
        asyncio.get_running_loop().create_task(self._restart_later(sup, delay))

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
