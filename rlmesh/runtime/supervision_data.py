"""The supervisor's plain data, apart from its processes and sockets: how often a dead actor
is started again (``RestartPolicy``), what the supervisor saw (``ActorEvent``) and one
child's heartbeat bookkeeping (``Watch``, kept by the head for its local children and fed by
the node agents' reports for the others). supervisor.py applies them to real children."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


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
    # Deaths (exits, and kills for a missed heartbeat or for memory) within ``crash_window``
    # units of the child's work after which it is given up, restarts left or not (0: no
    # such limit); its work is the field ``work_key`` of its status probes (and what its
    # owner adds with ``Supervisor.add_work``).
    max_crashes: int = 0
    crash_window: int = 0
    work_key: str = ""
    # Resident memory (MB, its child processes included) at which it is killed, and so
    # restarted as a dead child is (0: no limit); warned about at WARN_AT of it, once a life.
    max_memory_mb: float = 0.0
    memory_limit_name: str = "its memory limit"  # how messages name the limit

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
    answering), ``slow`` (a unit of its work far longer than usual), ``memory`` (near its
    limit), ``restarted`` or ``gave_up``. A death's ``cause`` is a word (``SIGSEGV``, ``exit
    code 1``, ``heartbeat``, ``memory``); a ``gave_up``'s is ``crashes`` (too many deaths
    within its work window) or ``restarts`` (none left)."""

    kind: str
    name: str
    detail: str
    exit_code: int | None = None
    last_lines: list[str] = field(default_factory=list)
    time: float = field(default_factory=time.time)
    cause: str = ""
    facts: dict[str, Any] = field(default_factory=dict)  # numbers a listener words itself


@dataclass
class Watch:
    """Heartbeat bookkeeping for one child."""

    interval: float
    timeout: float
    last_pong: float = field(default_factory=time.monotonic)
    last_ping: float = 0.0
    status: dict[str, Any] = field(default_factory=dict)
    # Kept by the child's node agent: hung is what the agent said (it confirmed it with one
    # more ping), not the age of its last report, whose delay is the agent's, not the child's.
    relayed: bool = False
    reported_hung: bool = False

    def due(self, now: float) -> bool:
        return not self.relayed and now - self.last_ping >= self.interval

    def hung(self, now: float) -> bool:
        if self.relayed:
            return self.reported_hung
        return now - self.last_pong > self.timeout

    def pong(self, now: float, status: dict[str, Any]) -> None:
        self.last_pong = now
        self.status = status
