"""The live progress table of ``rlmesh train``: one row per training iteration.

On a terminal the newest row is redrawn in place each iteration and kept (a new line
started) every ``keep_every_s`` seconds, so the screen shows the run's history at a
readable rate; into a file or a pipe every iteration is one plain line.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any, TextIO

from rlmesh.tune.table import fmt_elapsed

# (header, width) of each column
COLUMNS = (
    ("iter", 6), ("timesteps", 12), ("reward_mean", 12), ("reward_min", 11),
    ("reward_max", 11), ("len_mean", 9), ("steps/s", 10), ("elapsed", 9),
)
_CLEAR_LINE = "\r\x1b[K"


def _num(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _fmt_float(value: Any) -> str:
    number = _num(value)
    if number is None:
        return "-"  # no episode finished yet: RLlib reports NaN
    return f"{number:.1f}" if abs(number) < 1e6 else f"{number:.3g}"


def _fmt_int(value: Any) -> str:
    number = _num(value)
    return "-" if number is None else f"{int(number):,}"


class ProgressReporter:
    """Prints a header once, then a row per result (see the module docstring)."""

    def __init__(self, stream: TextIO | None = None, tty: bool | None = None,
                 keep_every_s: float = 10.0):
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty() if tty is None else tty
        self.keep_every_s = keep_every_s
        self._started = time.monotonic()
        self._header_done = False
        self._open_row = ""  # the row drawn in place and not yet kept (terminal only)
        self._last_kept = 0.0
        self._last_steps: float | None = None

    def header(self) -> str:
        return "  ".join(name.rjust(width) for name, width in COLUMNS)

    def row(self, result: dict) -> str:
        steps = _num(result.get("timesteps_total"))
        # End to end (sampling and learning), not the sampling-only throughput key.
        this_iter = _num(result.get("num_env_steps_sampled_this_iter"))
        if this_iter is None and steps is not None and self._last_steps is not None:
            this_iter = steps - self._last_steps
        self._last_steps = steps
        dt = _num(result.get("time_this_iter_s"))
        rate = this_iter / dt if this_iter is not None and dt else _num(
            result.get("num_env_steps_sampled_throughput_per_sec"))
        elapsed = _num(result.get("time_total_s"))
        values = (
            _fmt_int(result.get("training_iteration")), _fmt_int(steps),
            _fmt_float(result.get("episode_reward_mean")),
            _fmt_float(result.get("episode_reward_min")),
            _fmt_float(result.get("episode_reward_max")),
            _fmt_float(result.get("episode_len_mean")), _fmt_int(rate),
            fmt_elapsed(elapsed if elapsed is not None else time.monotonic() - self._started),
        )
        return "  ".join(v.rjust(width) for v, (_, width) in zip(values, COLUMNS))

    def report(self, result: dict) -> None:
        """Show one iteration's result."""
        if not self._header_done:
            self._write(self.header() + "\n")
            self._header_done = True
        line = self.row(result)
        if not self.tty:
            self._write(line + "\n")
            return
        now = time.monotonic()
        if self._open_row and now - self._last_kept >= self.keep_every_s:
            self._write("\n")  # keep the previous row; draw this one below it
            self._last_kept = now
        elif not self._open_row:
            self._last_kept = now
        self._write(_CLEAR_LINE + line)
        self._open_row = line

    def message(self, text: str) -> None:
        """Print a line of text without breaking the table (checkpoint saved, stopping...)."""
        if self.tty and self._open_row:
            self._write(_CLEAR_LINE + text + "\n" + self._open_row)
        else:
            self._write(text + "\n")

    def finish(self) -> None:
        """Keep the last row and end its line."""
        if self.tty and self._open_row:
            self._write("\n")
            self._open_row = ""

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()
