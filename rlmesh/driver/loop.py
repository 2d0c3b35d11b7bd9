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
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return self.submit(coro).result(timeout)

    def call_soon(self, fn: Any, *args: Any) -> None:
        """``fn(*args)`` on the loop's thread (what touches the loop's objects)."""
        self.loop.call_soon_threadsafe(fn, *args)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
