"""Warnings about what peers send, rate-limited per kind: a peer repeating a bad message must
not fill the log (a failing 56-byte tell logged 1.2 KB of traceback each time, 58 MB per
50,000). The next message that gets through says how many were suppressed."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

BURST = 10  # messages of one kind logged back to back
PER_SECOND = 1.0  # then this many a second
MAX_KINDS = 1024  # kinds remembered (they are names from code, bounded anyway)


@dataclass
class _Budget:
    tokens: float
    last: float
    suppressed: int = 0
    traceback_shown: bool = False


_budgets: dict[tuple[str, str], _Budget] = {}
_lock = threading.Lock()
suppressed_total = 0  # over the process's life, for tests and diagnostics


def log_limited(logger: logging.Logger, kind: str, msg: str, *args: Any,
                exc_info: bool = False, level: int = logging.WARNING) -> bool:
    """Log ``msg % args`` unless messages of ``kind`` (with ``logger``) came too fast; a
    traceback (``exc_info``) only with the first message of its kind. True if logged."""
    global suppressed_total
    now = time.monotonic()
    with _lock:
        budget = _budgets.get((logger.name, kind))
        if budget is None:
            if len(_budgets) >= MAX_KINDS:
                _budgets.clear()
            budget = _budgets[(logger.name, kind)] = _Budget(BURST, now)
        budget.tokens = min(BURST, budget.tokens + (now - budget.last) * PER_SECOND)
        budget.last = now
        if budget.tokens < 1:
            budget.suppressed += 1
            suppressed_total += 1
            return False
        budget.tokens -= 1
        suppressed, budget.suppressed = budget.suppressed, 0
        show_traceback = exc_info and not budget.traceback_shown
        budget.traceback_shown = budget.traceback_shown or show_traceback
    if suppressed:
        msg, args = msg + " (%d more like it suppressed)", (*args, suppressed)
    logger.log(level, msg, *args, exc_info=show_traceback)
    return True
