"""What a process is doing right now: thread stacks, asyncio tasks, event-loop lag.

Read from the control thread, so it works while the event loop is blocked. The
faulthandler fallback covers the case where even that thread cannot get the GIL.
"""

from __future__ import annotations

import asyncio
import faulthandler
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

# A loop that has not ticked for this long is reported as blocked.
BLOCKED_AFTER_S = 1.0
TICK_S = 0.1
DUMP_SIGNAL = signal.SIGUSR2


class LoopMonitor:
    """A task that ticks every TICK_S; the gap since its last tick is the loop's lag."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.last_tick = time.monotonic()
        self.max_lag = 0.0
        self.mean_lag = 0.0
        self._task: asyncio.Task[None] | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._task = loop.create_task(self._run(), name="rlmesh.loop_monitor")

    async def _run(self) -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(TICK_S)
            now = time.monotonic()
            lag = max(0.0, now - before - TICK_S)
            self.max_lag = max(self.max_lag, lag)
            self.mean_lag += 0.1 * (lag - self.mean_lag)
            self.last_tick = now

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def status(self) -> dict[str, Any]:
        since = time.monotonic() - self.last_tick
        return {
            "loop_running": self.loop is not None and self.loop.is_running(),
            "since_last_tick_s": round(since, 3),
            "blocked": self.loop is not None and since > BLOCKED_AFTER_S + TICK_S,
            "lag_mean_s": round(self.mean_lag, 4),
            "lag_max_s": round(self.max_lag, 4),
        }


def _frames(frame: Any) -> list[dict[str, Any]]:
    return [
        {"file": fs.filename, "line": fs.lineno, "func": fs.name, "code": fs.line or ""}
        for fs in traceback.extract_stack(frame)
    ]


def thread_stacks() -> list[dict[str, Any]]:
    names = {t.ident: t for t in threading.enumerate()}
    out = []
    for ident, frame in sys._current_frames().items():
        t = names.get(ident)
        out.append({
            "name": t.name if t else f"thread-{ident}",
            "ident": ident,
            "daemon": bool(t and t.daemon),
            "stack": _frames(frame),
        })
    return out


def task_stacks(loop: asyncio.AbstractEventLoop | None) -> list[dict[str, Any]]:
    if loop is None:
        return []
    for _ in range(5):  # the task set may change under us: it lives on another thread
        try:
            tasks = list(asyncio.all_tasks(loop))
            break
        except RuntimeError:
            continue
    else:
        return []
    out = []
    for task in tasks:
        coro = task.get_coro()
        out.append({
            "name": task.get_name(),
            "coro": getattr(coro, "__qualname__", repr(coro)),
            "done": task.done(),
            "stack": _await_chain(coro),
        })
    return out


def _await_chain(coro: Any) -> list[dict[str, Any]]:
    """One frame per coroutine, from the task's own down to the innermost awaited one
    (``task.get_stack()`` stops at the first)."""
    frames: list[dict[str, Any]] = []
    for _ in range(100):  # bounded: a chain is short; never loop on a cycle
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            break
        frames.append({"file": frame.f_code.co_filename, "line": frame.f_lineno,
                       "func": frame.f_code.co_name, "code": ""})
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
        if coro is None:
            break
    return frames


class Diagnostics:
    """Everything a stack request reports, gathered from registered sources."""

    def __init__(self, name: str, role: str) -> None:
        self.name = name
        self.role = role
        self.monitor = LoopMonitor()
        self.probes: dict[str, Callable[[], dict[str, Any]]] = {}

    def add_probe(self, key: str, fn: Callable[[], dict[str, Any]]) -> None:
        """Register a source of counters (queue depths, in-flight calls) for reports."""
        self.probes[key] = fn

    def _probe_values(self) -> dict[str, Any]:
        values = {}
        for key, fn in list(self.probes.items()):
            try:
                values[key] = fn()
            except Exception as exc:  # a probe must never break the report
                values[key] = {"error": repr(exc)}
        return values

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "role": self.role, "pid": os.getpid(),
                "loop": self.monitor.status(), "probes": self._probe_values()}

    def report(self) -> dict[str, Any]:
        report = self.status()
        report["threads"] = thread_stacks()
        report["tasks"] = task_stacks(self.monitor.loop)
        return report


def stopped_state(pid: int) -> str | None:
    """How ``pid`` is stopped, in words, or None when it is not: a stopped process (state T)
    runs no thread, so it neither answers nor dumps its stacks on DUMP_SIGNAL (the signal
    waits, pending, for SIGCONT); its dump file stays empty."""
    import psutil

    try:
        status = psutil.Process(pid).status()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    if status == psutil.STATUS_STOPPED:
        return f"stopped (state T, SIGSTOP or Ctrl-Z): kill -CONT {pid} resumes it"
    if status == psutil.STATUS_TRACING_STOP:
        return "stopped by a tracer (state t: a debugger holds it)"
    return None


def install_fallback_dump(path: Path) -> Any:
    """Dump all threads to ``path`` on DUMP_SIGNAL, from C, even while the GIL is held."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fh = open(path, "a", buffering=1)
    faulthandler.register(DUMP_SIGNAL, file=fh, all_threads=True, chain=False)
    return fh


def uninstall_fallback_dump(fh: Any) -> None:
    if fh is not None:
        faulthandler.unregister(DUMP_SIGNAL)
        fh.close()
