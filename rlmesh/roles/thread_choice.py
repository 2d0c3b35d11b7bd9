"""How many torch threads a learner that computes alone takes, chosen by timing its own
updates. Two threads made SAC's update 1.7x faster on an idle 2-core machine and 3-4x slower
on the same machine with two other busy processes (OpenMP's threads wait for each other at
every operation, and one of them is always descheduled): no fixed count is right for both,
and the load changes while a run lasts."""

from __future__ import annotations

import logging
import statistics
import time
from typing import Callable

import torch

log = logging.getLogger(__name__)


class ThreadChoice:
    """Times ``trials`` updates at each count (after one to warm up: a new thread pool, new
    buffers), keeps the fastest per sample trained for ``hold_s`` seconds, then times them
    all again. ``begin()`` before an update, ``end(started, samples)`` after it."""

    def __init__(self, counts: tuple[int, ...], trials: int = 3, hold_s: float = 30.0,
                 clock: Callable[[], float] = time.perf_counter,
                 set_threads: Callable[[int], None] = torch.set_num_threads) -> None:
        self.counts = tuple(sorted(set(counts)))
        self.trials, self.hold_s = trials, hold_s
        self.clock, self.set_threads = clock, set_threads
        self.chosen: int | None = None  # the count held, once the first timing is done
        self._held_since = 0.0
        self._timing: list[int] = []  # the counts still to time, this one first
        self._times: dict[int, list[float]] = {}
        self._warm = False
        self._current = 0
        self._explore()

    def _explore(self) -> None:
        self._timing = list(self.counts)
        self._times = {c: [] for c in self.counts}
        self._use(self._timing[0])

    def _use(self, count: int) -> None:
        if count != self._current:
            self.set_threads(count)
            self._current = count
            self._warm = False

    def begin(self) -> float:
        if not self._timing and self.clock() - self._held_since > self.hold_s:
            self._explore()
        return self.clock()

    def end(self, started: float, samples: int) -> None:
        if not self._timing:
            return
        seconds = self.clock() - started
        if not self._warm:  # the first update at a count pays for starting its threads
            self._warm = True
            return
        count = self._timing[0]
        self._times[count].append(seconds / max(1, samples))
        if len(self._times[count]) < self.trials:
            return
        self._timing.pop(0)
        if self._timing:
            self._use(self._timing[0])
            return
        best = min(self.counts, key=lambda c: statistics.median(self._times[c]))
        if best != self.chosen:
            log.debug("learner: %d torch threads (seconds per sample by count: %s)", best,
                      {c: statistics.median(t) for c, t in self._times.items()})
        self.chosen = best
        self._use(best)
        self._held_since = self.clock()
