"""A pool's coroutine, callable from the driver's thread: written once as ``async def``, its
blocking form (``blocking``) runs it on the mesh's loop and waits; ``started`` returns its
future at once. No pool method is written twice."""

from __future__ import annotations

import functools
from typing import Any, Callable


class _OnLoop:
    def __init__(self, coro_fn: Callable[..., Any], wait: bool) -> None:
        self.coro_fn, self.wait = coro_fn, wait
        functools.update_wrapper(self, coro_fn)  # type: ignore[arg-type]

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        coro_fn, loop = self.coro_fn, obj.loop

        @functools.wraps(coro_fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            coro = coro_fn(obj, *args, **kwargs)
            return loop.run(coro) if self.wait else loop.submit(coro)

        return call


def blocking(coro_fn: Callable[..., Any]) -> Any:
    """``coro_fn`` (a method of an object with ``loop``, a ``LoopThread``) called from the
    driver's thread: run on that loop, its result returned."""
    return _OnLoop(coro_fn, wait=True)


def started(coro_fn: Callable[..., Any]) -> Any:
    """``coro_fn`` started on the loop; its ``concurrent.futures.Future`` returned at once
    (cancelling it cancels the call)."""
    return _OnLoop(coro_fn, wait=False)
