"""The driver's event loop on a thread of its own, which the mesh owns: every remote call of
a run is a coroutine run here, so the user's thread stays free for the learner's computation
while heartbeats and weight fetches are served."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any, Coroutine, TypeVar

T = TypeVar("T")


class LoopThread:
    """An event loop (uvloop) on a daemon thread; ``run(coro)`` waits for its result,
    ``submit(coro)`` returns a future at once."""

    def __init__(self) -> None:
        import uvloop

        self.loop = uvloop.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="rlmesh.driver-loop",
                                       daemon=True)
        self.thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start ``coro`` on the loop; cancelling the future cancels it there."""
        if self.loop.is_closed():
            coro.close()
            raise RuntimeError("the run's event loop is closed: the run was stopped")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return self.submit(coro).result(timeout)

    def call_soon(self, fn: Any, *args: Any) -> None:
        """``fn(*args)`` on the loop's thread (what touches the loop's objects)."""
        self.loop.call_soon_threadsafe(fn, *args)

    def close(self, timeout: float = 5.0) -> None:
        """Cancel what still runs on the loop, stop it and close it. Closing is what frees
        its file descriptors: a stopped uvloop left open kept an epoll, an io_uring, an
        eventfd and two pipes, five descriptors for every run a process built."""
        if self.loop.is_closed():
            return
        if self.thread.is_alive():
            wind_down = asyncio.run_coroutine_threadsafe(_cancel_tasks(), self.loop)
            try:
                wind_down.result(timeout)
            except Exception:  # noqa: BLE001 - a task that would not end; stop regardless
                wind_down.cancel()
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout)
        if not self.thread.is_alive():
            self.loop.close()


async def _cancel_tasks() -> None:
    """Every other task of the running loop cancelled and awaited; async generators closed."""
    me = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not me]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.get_running_loop().shutdown_asyncgens()
