"""Limits on a supervised child besides its count of restarts: how often it may die within an
amount of the work it does (``DeathBudget``), and how much memory it may hold, counted with
the processes it started (``MemoryGauge``). Plain code: the supervisor applies them."""

from __future__ import annotations

import signal
import time
from collections import deque
from typing import Any

import psutil

# The processes a child started (a simulator an env runs as a subprocess) are looked up this
# often: a scan of every process of the machine (~7 ms for 90 processes), while reading the
# RSS of those known costs ~0.05 ms each and is done at every check.
TREE_EVERY_S = 10.0
# The share of its memory limit at which a child is warned about, once per life.
WARN_AT = 0.8


class DeathBudget:
    """A child that dies ``deaths`` times within ``window`` units of its work (env steps for
    an env runner) is given up on, however many restarts it has left: restarting it would
    only crash again, each time after a longer backoff, and the run would crawl on unseen.

    Work is what the child reports of its current life (a counter it restarts from 0) or
    what its owner counted for it, whichever is more: a heartbeat's report is up to a
    second old, the owner's count misses what the child did but never delivered. A child
    whose work is never counted (no probe reports it, its owner adds none: an ES runner) is
    never given up by this rule: its deaths cannot be set against its work."""

    def __init__(self, deaths: int, window: int) -> None:
        self.deaths = deaths  # 0: no such limit
        self.window = window
        self.done = 0  # work of the lives that ended
        self.reported = 0  # the current life's own count, at its last heartbeat
        self.added = 0  # the owner's count of it
        self.measured = False  # its work was ever counted
        self._starts: deque[int] = deque(maxlen=max(1, deaths))  # work when each life began

    def report(self, work: int) -> None:
        self.reported, self.measured = max(self.reported, int(work)), True

    def add(self, work: int) -> None:
        self.added, self.measured = self.added + int(work), True

    def died(self) -> int | None:
        """The current life ended in a death: the work of the last ``deaths`` lives when they
        took no more than ``window`` of it (the child is to be given up), else None."""
        start, self.done = self.done, self.done + max(self.reported, self.added)
        self.reported = self.added = 0
        self._starts.append(start)
        if not self.deaths or not self.measured or len(self._starts) < self.deaths:
            return None
        spent = self.done - self._starts[0]
        return spent if spent <= self.window else None

    def verdict(self, name: str, spent: int, causes: list[str],
                work_key: str) -> tuple[str, dict[str, Any]]:
        """The line, and its numbers, of child ``name`` given up after ``died`` said ``spent``;
        ``causes``: how each of its deaths came (``cause_of``), in order."""
        last = causes[-self.deaths:]
        last = sorted(set(last), key=last.index)
        unit = work_key or "units of work"
        return (f"{name} died {self.deaths} times in {spent:,} {unit} ({', '.join(last)}); "
                f"not restarting it (max {self.deaths} within {self.window:,})",
                {"deaths": self.deaths, "work": spent, "causes": last, "window": self.window})


def cause_of(code: int | None) -> str:
    """How a process ended, in a word: ``SIGSEGV``, ``exit code 1``, or ``no exit code``."""
    if code is None:
        return "no exit code"
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


class MemoryGauge:
    """The resident memory of a process and of its descendants (their RSS summed), in MB,
    and when to read it next: sooner the closer it is to its limit and the faster it grows
    (a leak of 150 MB/s passes a limit by ~15 MB at most, read every 0.1 s near it)."""

    def __init__(self, pid: int) -> None:
        self._proc = psutil.Process(pid)
        self._tree: list[psutil.Process] = []
        self._tree_at = 0.0
        self.mb = 0.0  # at the last reading
        self.rate = 0.0  # MB/s since the reading before
        self.read_at = 0.0
        self.next_at = 0.0

    def rss_mb(self, now: float) -> float | None:
        """None once the process is gone."""
        if now - self._tree_at >= TREE_EVERY_S:
            self._tree_at = now
            try:
                self._tree = self._proc.children(recursive=True)
            except psutil.Error:
                return None
        try:
            total = self._proc.memory_info().rss
        except psutil.Error:
            return None
        for proc in self._tree:
            try:
                total += proc.memory_info().rss
            except psutil.Error:  # ended since the last scan
                pass
        mb = total / (1 << 20)
        if self.read_at and now > self.read_at:
            self.rate = (mb - self.mb) / (now - self.read_at)
        self.mb, self.read_at = mb, now
        return mb

    def schedule(self, now: float, limit_mb: float, soonest_s: float) -> None:
        """The next reading: in a second, or sooner when growing at twice its last rate (at
        least 1 GB/s) would reach ``limit_mb`` before that; never sooner than ``soonest_s``."""
        headroom = max(0.0, limit_mb - self.mb)
        self.next_at = now + min(1.0, max(soonest_s, headroom / max(1000.0, 2 * self.rate)))
