"""``MetricsLogger``: values logged by callbacks, env runners and learners, reduced per
training iteration (RLlib new stack's ``rlmesh.utils.metrics.metrics_logger``).

Each key (a string, or a tuple for nested keys) keeps the reduce it was first logged with:
``"mean"`` (over the last ``window`` values, or an exponential moving average with
``ema_coeff``, 0.01 when neither is given, as RLlib), ``"min"``, ``"max"``, ``"sum"`` (a
running total without ``window``) or ``None`` (the list of values). ``clear_on_reduce``
starts the key afresh after each ``reduce()``.

Across processes: an env runner's logger hands the values logged since its last hand-over
(``pending_state()``, plain lists of numbers for the fragment), and the driver's logger
replays them in arrival order (``merge_and_log_n_dicts``). So a window mean over many runners
is the mean of their last ``window`` values, not a mean of per-runner means.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Iterator

REDUCES = ("mean", "min", "max", "sum", None)


def _number(value: Any) -> Any:
    if isinstance(value, (int, float)):
        return value
    item = getattr(value, "item", None)  # numpy and torch scalars
    if item is not None:
        try:
            return item()
        except (TypeError, ValueError):
            pass
    return value


class Stats:
    """One key's values and how they reduce."""

    __slots__ = ("reduce", "window", "ema_coeff", "clear_on_reduce", "values", "ema",
                 "total", "pending", "count")

    def __init__(self, reduce: str | None = "mean", window: int | float | None = None,
                 ema_coeff: float | None = None, clear_on_reduce: bool = False,
                 track: bool = False) -> None:
        if reduce not in REDUCES:
            raise ValueError(f"reduce: {reduce!r} is not one of {REDUCES}")
        if window is not None and window != float("inf") and (int(window) != window or window < 1):
            raise ValueError(f"window: {window!r} is not a positive whole number")
        if ema_coeff is not None:
            if reduce != "mean":
                raise ValueError(f"ema_coeff: only reduce='mean' averages (reduce is {reduce!r})")
            if window is not None:
                raise ValueError("ema_coeff: give either window or ema_coeff, not both")
            if not 0.0 < ema_coeff <= 1.0:
                raise ValueError(f"ema_coeff: {ema_coeff!r} is outside (0, 1]")
        if reduce == "mean" and window is None and ema_coeff is None:
            ema_coeff = 0.01  # RLlib's default for a mean without a window
        self.reduce = reduce
        self.window = None if window == float("inf") else (int(window) if window else None)
        self.ema_coeff = ema_coeff
        self.clear_on_reduce = clear_on_reduce
        self.values: list[Any] = []
        self.ema: float | None = None
        self.total = 0  # reduce "sum" without a window: the running total only
        self.count = 0
        # Values not yet handed to the driver (an env runner's logger); None where untracked.
        self.pending: list[Any] | None = [] if track else None

    @property
    def _running_sum(self) -> bool:
        return self.reduce == "sum" and self.window is None

    def push(self, value: Any) -> None:
        self.count += 1
        if self.pending is not None:
            self.pending.append(value)
        if self.ema_coeff is not None:
            self.ema = value if self.ema is None else (
                (1.0 - self.ema_coeff) * self.ema + self.ema_coeff * value)
        elif self._running_sum:
            self.total += value
        else:
            self.values.append(value)
            w = self.window
            if w is not None and len(self.values) > 2 * w:  # amortised trim
                del self.values[:-w]

    def peek(self) -> Any:
        if self.ema_coeff is not None:
            return float("nan") if self.ema is None else self.ema
        if self._running_sum:
            return self.total
        values = self.values[-self.window:] if self.window else self.values
        if self.reduce is None:
            return list(values)
        if not values:
            return 0 if self.reduce == "sum" else float("nan")
        if self.reduce == "mean":
            return sum(values) / len(values)
        if self.reduce == "sum":
            return sum(values)
        return min(values) if self.reduce == "min" else max(values)

    def reduced(self) -> Any:
        out = self.peek()
        if self.clear_on_reduce:
            self.values, self.ema, self.total, self.count = [], None, 0, 0
        elif self.window is not None and len(self.values) > self.window:
            del self.values[:-self.window]
        return out

    def settings(self) -> dict[str, Any]:
        return {"reduce": self.reduce, "window": self.window, "ema_coeff": self.ema_coeff,
                "clear_on_reduce": self.clear_on_reduce}

    def take_pending(self) -> list[Any]:
        pending, self.pending = self.pending or [], []
        if self._running_sum and len(pending) > 1:
            return [sum(pending)]  # a total needs only the sum of what was added
        return pending


class MetricsLogger:
    """See the module docstring. ``track_pending=True`` for a logger whose values are
    handed on (an env runner's, a learner's)."""

    def __init__(self, track_pending: bool = False) -> None:
        self.stats: dict[tuple, Stats] = {}
        self.track_pending = track_pending

    # --- logging ------------------------------------------------------------------------
    def log_value(self, key: str | tuple, value: Any, reduce: str | None = "mean",
                  window: int | float | None = None, ema_coeff: float | None = None,
                  clear_on_reduce: bool = False, **kwargs: Any) -> None:
        """Log ``value`` under ``key``; the first call for a key fixes how it reduces."""
        path = _path(key)
        stats = self.stats.get(path)
        if stats is None:
            if any(path[:i] in self.stats for i in range(1, len(path))):
                raise KeyError(f"key {path!r}: a prefix of it already holds a value")
            stats = self.stats[path] = Stats(reduce, window, ema_coeff, clear_on_reduce,
                                             self.track_pending)
        stats.push(_number(value))

    def log_dict(self, stats_dict: dict, *, key: str | tuple | None = None,
                 reduce: str | None = "mean", window: int | float | None = None,
                 ema_coeff: float | None = None, clear_on_reduce: bool = False,
                 **kwargs: Any) -> None:
        """Each leaf of the nested ``stats_dict`` logged under its path (below ``key``)."""
        prefix = _path(key) if key is not None else ()
        for name, value in stats_dict.items():
            if isinstance(value, dict):
                self.log_dict(value, key=prefix + (name,), reduce=reduce, window=window,
                              ema_coeff=ema_coeff, clear_on_reduce=clear_on_reduce)
            else:
                self.log_value(prefix + (name,), value, reduce=reduce, window=window,
                               ema_coeff=ema_coeff, clear_on_reduce=clear_on_reduce)

    @contextlib.contextmanager
    def log_time(self, key: str | tuple, reduce: str = "mean", window: int | None = None,
                 ema_coeff: float | None = None, clear_on_reduce: bool = False,
                 **kwargs: Any) -> Iterator[None]:
        """``with logger.log_time("env_step_s"):`` logs the seconds the block took."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.log_value(key, time.perf_counter() - start, reduce=reduce, window=window,
                           ema_coeff=ema_coeff, clear_on_reduce=clear_on_reduce)

    def set_value(self, key: str | tuple, value: Any, reduce: str | None = "mean",
                  window: int | float | None = None, ema_coeff: float | None = None,
                  clear_on_reduce: bool = False, **kwargs: Any) -> None:
        """``key`` started afresh with the one value ``value``."""
        self.stats.pop(_path(key), None)
        self.log_value(key, value, reduce=reduce, window=window, ema_coeff=ema_coeff,
                       clear_on_reduce=clear_on_reduce)

    # --- reading ------------------------------------------------------------------------
    def peek(self, key: str | tuple | None = None, *, default: Any = None, **kwargs: Any) -> Any:
        """The reduced value of ``key`` now (a nested dict for a key above others; all
        keys for None), nothing cleared; ``default`` for a key never logged (KeyError
        without one)."""
        return self._reduced(key, default, peek=True)

    def reduce(self, key: str | tuple | None = None, **kwargs: Any) -> Any:
        """The reduced values as a nested dict (of ``key``'s keys, or all); keys logged with
        ``clear_on_reduce`` start afresh."""
        return self._reduced(key, {}, peek=False)

    def _reduced(self, key: Any, default: Any, peek: bool) -> Any:
        path = _path(key) if key is not None else ()
        stats = self.stats.get(path) if path else None
        if stats is not None:
            return stats.peek() if peek else stats.reduced()
        out: dict = {}
        for p, s in self.stats.items():
            if p[:len(path)] == path:
                _put(out, p[len(path):], s.peek() if peek else s.reduced())
        if out or not path:
            return out
        if default is None and peek:
            raise KeyError(f"metrics key {path!r} was never logged")
        return default

    def has_key(self, key: str | tuple) -> bool:
        path = _path(key)
        return any(p[:len(path)] == path for p in self.stats)

    __contains__ = has_key

    def delete(self, *key: Any, key_error: bool = True) -> None:
        path = _path(key[0] if len(key) == 1 else tuple(key))
        doomed = [p for p in self.stats if p[:len(path)] == path]
        if not doomed and key_error:
            raise KeyError(f"metrics key {path!r} was never logged")
        for p in doomed:
            del self.stats[p]

    def reset(self) -> None:
        self.stats.clear()

    # --- across processes ---------------------------------------------------------------
    def pending_state(self) -> dict[str, Any]:
        """What was logged since the last call, as plain data for a fragment: ``{"k":
        [[path...], settings, values], ...}``; an empty dict when nothing was."""
        items = []
        for path, s in self.stats.items():
            if s.pending:
                items.append([list(path), s.settings(), s.take_pending()])
        return {"items": items} if items else {}

    def merge_and_log_n_dicts(self, stats_dicts: list[dict], key: str | tuple | None = None,
                              **kwargs: Any) -> None:
        """The values of other loggers' ``pending_state()`` logged here, in order (under
        ``key`` if given): the same as if this logger had seen each value itself."""
        prefix = _path(key) if key is not None else ()
        for state in stats_dicts:
            for path, settings, values in (state or {}).get("items", ()):
                full = prefix + tuple(path)
                stats = self.stats.get(full)
                if stats is None:
                    stats = self.stats[full] = Stats(track=self.track_pending, **settings)
                for value in values:
                    stats.push(value)

    aggregate = merge_and_log_n_dicts  # RLlib's newer name

    def get_state(self) -> dict[str, Any]:
        """Everything (settings and the values kept) as plain data."""
        return {"stats": [[list(p), s.settings(), list(s.values), s.ema, s.total, s.count]
                          for p, s in self.stats.items()]}

    def set_state(self, state: dict[str, Any]) -> None:
        self.stats = {}
        for path, settings, values, ema, total, count in state.get("stats", ()):
            s = self.stats[tuple(path)] = Stats(track=self.track_pending, **settings)
            s.values, s.ema, s.total, s.count = list(values), ema, total, count


def _path(key: Any) -> tuple:
    if isinstance(key, tuple):
        if not key:
            raise ValueError("key: an empty tuple names no metric")
        return key
    if isinstance(key, list):
        return tuple(key)
    if isinstance(key, str):
        return (key,)
    raise TypeError(f"key: {key!r} is not a string or a tuple of strings")


def _put(out: dict, path: tuple, value: Any) -> None:
    if not path:
        return
    node = out
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = value


class RunnerMetricsLogger(MetricsLogger):
    """An env runner's ``metrics``: RLlib's MetricsLogger for its callbacks (values handed
    to the driver with each fragment) that, called, returns the runner's counters (the
    runner's older ``metrics()`` call, which drivers and tests make)."""

    def __init__(self, counters: Any) -> None:
        super().__init__(track_pending=True)
        self._counters = counters

    def __call__(self) -> dict[str, Any]:
        return self._counters()
