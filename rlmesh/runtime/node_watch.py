"""Heartbeats of a node's actors, kept on their node: the decisions, without sockets.

The head's supervisor used to ping every actor process of the job once a second itself,
across the network for actors on other nodes: with 1,000 runners on 8 nodes, 1,000 pings a
second left one process. Now the node agent (launcher/agent.py), on the same machine as its
actors, pings them; ``ChildWatch`` is its bookkeeping for one of them, and ``entry()`` what
the agent tells the head of it in the poll the head already makes of each agent (a few
times a second per node, whatever the number of actors on it):

- ``age``: seconds since its last pong, as the agent saw it (the head's heartbeat ages);
- ``hung``: no pong for ``timeout``, and none to one more ping within ``confirm_s`` either
  (the same confirmation the head's supervisor gives its local children), with ``stopped``:
  the process's stopped state read on its own machine (the head cannot read another
  machine's /proc);
- ``status``: what the head's supervisor reads from a pong's status (``small_status``: its
  loop's state, its work counter for the crash window, a blocked loop's ``busy``, a unit of
  work past its limit), sent only when it changed: a few hundred bytes of the kilobytes a
  pong carries;
- ``mb``: its resident memory with its child processes (``MemoryGauge``), measured on its
  node where the head asks for a memory limit, sent when it changed by a megabyte or more.

The head's supervisor applies these through the decisions it applies to its local children
(supervisor.py: kill and restart a hung one, memory, blocked, slow, the death budget).
"""

from __future__ import annotations

from typing import Any

from .supervision_data import Watch

CONFIRM_S = 1.0  # as the head's Supervisor's confirm_s
# The probe fields of a unit of work (work_clock.py) that slow_units reads.
_SLOW_FIELDS = ("work", "running_s", "warn_after_s", "median_s")


def small_status(status: dict[str, Any], work_key: str = "") -> dict[str, Any]:
    """The part of a pong's ``status`` the head's supervisor decides on: the loop's state
    (how long it has been stuck only while it is), per probe its ``work_key`` counter, its
    ``busy`` while the loop is blocked, and a unit of work only once past its limit. It
    changes only when one of those does, so it is sent only then."""
    loop = status.get("loop") or {}
    blocked = bool(loop.get("blocked"))
    small_loop: dict[str, Any] = {"loop_running": bool(loop.get("loop_running")),
                                  "blocked": blocked}
    if blocked:
        small_loop["since_last_tick_s"] = round(float(loop.get("since_last_tick_s") or 0), 1)
    probes: dict[str, Any] = {}
    for key, probe in (status.get("probes") or {}).items():
        if not isinstance(probe, dict):
            continue
        kept: dict[str, Any] = {}
        if work_key and isinstance(probe.get(work_key), (int, float)):
            kept[work_key] = probe[work_key]
        if blocked and probe.get("busy"):
            kept["busy"] = probe["busy"]
        limit = probe.get("warn_after_s")
        if isinstance(limit, (int, float)) and float(probe.get("running_s") or 0) > limit:
            kept.update({f: probe[f] for f in _SLOW_FIELDS if f in probe})
        if kept:
            probes[key] = kept
    return {"pid": status.get("pid"), "loop": small_loop, "probes": probes}


class ChildWatch:
    """The agent's watch of one actor process of its node: when to ping it, whether it is
    hung, and what of it the head has not been told yet."""

    def __init__(self, pid: int, interval: float = 1.0, timeout: float = 5.0, *,
                 now: float, confirm_s: float = CONFIRM_S, work_key: str = "",
                 max_memory_mb: float = 0.0) -> None:
        self.pid = pid
        self.watch = Watch(interval, timeout, last_pong=now)
        self.confirm_s = confirm_s
        self.work_key = work_key
        self.max_memory_mb = max_memory_mb  # 0: its memory is not measured
        self.confirm_from: float | None = None  # when the confirming ping went
        self.hung = False
        self.stopped: str | None = None  # its stopped state, when it was found hung
        self.mb: float | None = None  # its latest memory reading
        self._sent_status: dict[str, Any] | None = None
        self._sent_mb: float | None = None

    def configure(self, interval: float, timeout: float, work_key: str = "",
                  max_memory_mb: float = 0.0) -> None:
        """The head's numbers for it (its Job's heartbeat, its restart policy's work key and
        memory limit), which arrive just after it started."""
        self.watch.interval, self.watch.timeout = float(interval), float(timeout)
        if work_key != self.work_key:
            self._sent_status = None  # the head is to see the counter it now asks for
        self.work_key, self.max_memory_mb = work_key, float(max_memory_mb)

    def pong(self, now: float, status: dict[str, Any]) -> None:
        self.watch.pong(now, small_status(status, self.work_key))
        self.confirm_from, self.hung, self.stopped = None, False, None

    def step(self, now: float) -> bool:
        """Advance its state at ``now``; True when a ping is to go now (due, or the one that
        confirms a missed heartbeat). Past ``timeout`` without a pong, one more ping; with
        none within ``confirm_s`` of it, it is hung (the caller reads its stopped state)."""
        if self.hung or not self.watch.hung(now):
            if self.watch.due(now):
                self.watch.last_ping = now
                return True
            return False
        if self.confirm_from is None:
            self.confirm_from = now
            self.watch.last_ping = now
            return True
        if now - self.confirm_from >= self.confirm_s:
            self.hung = True
        return False

    def entry(self, now: float) -> dict[str, Any]:
        """What the head is told of it in this poll: its pid and heartbeat age always, and
        what changed since the last poll."""
        age = round(max(0.0, now - self.watch.last_pong), 2)
        out: dict[str, Any] = {"pid": self.pid, "age": age}
        if self.hung:
            out["hung"] = True
            if self.stopped:
                out["stopped"] = self.stopped
        status = self.watch.status
        if status and status != self._sent_status:
            out["status"] = self._sent_status = status
        if self.mb is not None and (self._sent_mb is None or abs(self.mb - self._sent_mb) >= 1.0):
            out["mb"] = self._sent_mb = round(self.mb, 1)
        return out
