"""The live trial table of a sweep (status, iteration, metric, time, searched values), in
place of ``rlmesh train``'s single-trial progress table: redrawn in place on a terminal,
printed every ``print_every_s`` into a file or pipe; event lines always go through."""

from __future__ import annotations

import sys
import time
from collections import Counter
from typing import TextIO


def fmt_elapsed(seconds: float) -> str:
    """``h:mm:ss``."""
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def trial_rows(trials: list, metric: str) -> list[str]:
    name_w = max([len("trial")] + [len(t.trial_id) for t in trials])
    head = f"{'trial'.ljust(name_w)}  {'status':<10}  {'iter':>5}  {metric[-24:]:>24}  {'time':>8}  params"
    rows = [head]
    for t in trials:
        params = ", ".join(f"{k.rsplit('/', 1)[-1]}={_short(v)}" for k, v in t.params.items())
        rows.append(f"{t.trial_id.ljust(name_w)}  {t.status:<10}  {t.iteration:>5}  "
                    f"{_metric(t.metric(metric)):>24}  {fmt_elapsed(t.elapsed):>8}  {params}")
    return rows


def _short(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


class _Null:
    def write(self, text):
        pass

    def flush(self):
        pass

    def isatty(self):
        return False


MAX_ROWS = 20  # rows of the live table: running trials first, then the best finished


class TrialTable:
    def __init__(self, metric: str, stream: TextIO | None = None, tty: bool | None = None,
                 print_every_s: float = 15.0, verbose: int = 1):
        self.metric = metric
        self.stream = stream or (sys.stdout if verbose else _Null())
        self.tty = self.stream.isatty() if tty is None else tty
        self.print_every_s = print_every_s
        self._drawn = 0  # lines of the table now on screen (terminal only)
        self._last = 0.0

    def status_line(self, trials: list, resources: str) -> str:
        counts = Counter(t.status for t in trials)
        parts = " | ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        return f"== sweep: {len(trials)} trials: {parts}; {resources}"

    def show(self, trials: list, resources: str, force: bool = False) -> None:
        now = time.monotonic()
        if not force and not self.tty and now - self._last < self.print_every_s:
            return
        if not force and self.tty and now - self._last < 0.5:
            return
        self._last = now
        shown = _pick(trials, self.metric) if len(trials) > MAX_ROWS else trials
        lines = [self.status_line(trials, resources), *trial_rows(shown, self.metric)]
        if len(shown) < len(trials):
            lines.append(f"... and {len(trials) - len(shown)} more")
        if self.tty:
            self._erase()
            self._drawn = len(lines)
        self._write("\n".join(lines) + "\n")

    def message(self, text: str) -> None:
        """An event (a trial placed, finished, pruned, exploited) above the table."""
        if self.tty:
            self._erase()
            self._drawn = 0
        self._write(text + "\n")

    def finish(self, trials: list, resources: str) -> None:
        self.show(trials, resources, force=True)
        self._drawn = 0

    def _erase(self) -> None:
        if self._drawn:
            self._write(f"\x1b[{self._drawn}F\x1b[J")

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()


def _metric(value) -> str:
    return "-" if value is None else f"{value:.5g}"


def _pick(trials: list, metric: str) -> list:
    """The rows worth a look when there are many: running, then best finished, then pending."""
    running = [t for t in trials if t.status == "RUNNING"]
    scored = sorted((t for t in trials if t.status != "RUNNING" and t.metric(metric) is not None),
                    key=lambda t: -t.metric(metric))
    rest = [t for t in trials if t.status != "RUNNING" and t.metric(metric) is None]
    return (running + scored + rest)[:MAX_ROWS]
