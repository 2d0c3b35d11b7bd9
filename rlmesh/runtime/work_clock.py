"""How long a process's units of work take (a learner's updates): the one running now and
the median of the recent ones, reported in the heartbeat's status, so that the supervisor
can say when one runs far longer than usual (``Supervisor``'s ``slow`` event)."""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque
from typing import Any

# A unit running longer than max(floor_s, SLOW_FACTOR x the median of the recent ones) is
# reported. The updates of one run vary little (same batch sizes: PPO's on CartPole within
# 2x of their median here); 5x is far outside that and still says within a minute that a
# 10 s update is stuck. The first unit (imports, lazy set-up) is no measure of the others.
SLOW_FACTOR = 5.0
WARM_UP_UNITS = 1
RECENT_UNITS = 50


class WorkClock:
    """Times units of work (``with clock("update 12"):``, from one thread at a time);
    ``probe()``, registered with the process's diagnostics, tells the heartbeat what runs
    now and for how long."""

    def __init__(self, what: str, floor_s: float) -> None:
        self.what = what  # the running unit's name, by default "<what> <its number>"
        self.floor_s = floor_s  # 0: never report
        self.units = 0  # started
        self._label = ""
        self._started: float | None = None
        self._recent: deque[float] = deque(maxlen=RECENT_UNITS)
        self._lock = threading.Lock()

    def __call__(self, label: str) -> "WorkClock":
        """This clock, naming the next unit ``label``."""
        self._label = label
        return self

    def __enter__(self) -> "WorkClock":
        with self._lock:
            self.units += 1
            self._label = self._label or f"{self.what} {self.units}"
            self._started = time.monotonic()
        return self

    def __exit__(self, *exc: Any) -> None:
        with self._lock:
            if self._started is not None and self.units > WARM_UP_UNITS:
                self._recent.append(time.monotonic() - self._started)
            self._started, self._label = None, ""

    def warn_after_s(self) -> float | None:
        """How long the running unit may take before it is reported (None: not yet known)."""
        if not self.floor_s or not self._recent:
            return None
        return max(self.floor_s, SLOW_FACTOR * statistics.median(self._recent))

    def probe(self) -> dict[str, Any]:
        """``{"work": "update 12", "running_s": ..., "warn_after_s": ..., "median_s": ...}``
        while a unit runs past its warm-up; ``{}`` otherwise."""
        with self._lock:
            started, unit = self._started, self._label
            limit = self.warn_after_s() if started is not None else None
            median = statistics.median(self._recent) if limit is not None else 0.0
        if limit is None:
            return {}
        return {"work": unit, "running_s": time.monotonic() - started,
                "warn_after_s": limit, "median_s": median}


def slow_units(status: dict[str, Any], reported: set[str]) -> list[tuple[str, str]]:
    """``(probe key, line)`` for each unit of work in a process's ``status`` (the probes of
    its WorkClocks) that has run past its ``warn_after_s`` and is not in ``reported`` (where
    it goes, the units before it of the same probe forgotten): the line names where to see
    why, ``rlmesh stack``, while the unit still runs."""
    out = []
    for key, p in (status.get("probes") or {}).items():
        if not isinstance(p, dict) or "warn_after_s" not in p:
            continue
        unit = f"{key} {p.get('work')}"
        if p.get("running_s", 0) <= p["warn_after_s"] or unit in reported:
            continue
        reported.intersection_update({u for u in reported if not u.startswith(f"{key} ")})
        reported.add(unit)
        running, median = float(p["running_s"]), float(p.get("median_s") or 0.0)
        ratio = f"{running / median:,.0f}x its median of {median:.2g} s" if median else "no median"
        out.append((key, f"{p.get('work')} has run {running:.1f} s ({ratio}): stuck? `rlmesh "
                         f"stack --pid {status.get('pid', '')}` shows where it is"))
    return out
