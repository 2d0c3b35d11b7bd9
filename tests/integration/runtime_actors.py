"""Actor classes for the runtime integration tests (importable, so child processes find them)."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

import numpy as np

from rlmesh.runtime import Actor, get_actor_sync


class Counter(Actor):
    """A named counter, as in RLlib's global-coordination example."""

    def __init__(self, start: int = 0) -> None:
        self.n = start

    def inc(self, k: int = 1) -> int:
        self.n += k
        return self.n

    def get(self) -> int:
        return self.n


class Worker(Actor):
    """Does work that touches other actors and the process itself."""

    def __init__(self) -> None:
        self.items: list[float] = []

    async def slow(self, seconds: float) -> float:
        await asyncio.sleep(seconds)
        return seconds

    async def consume(self, arr: np.ndarray) -> None:
        await asyncio.sleep(0.01)  # slower than the sender: credits must hold it back
        self.items.append(float(arr.sum()))

    def picky(self, item: int) -> None:
        if item == 3:
            raise ValueError("three is not allowed")
        self.items.append(float(item))

    def received(self) -> list[float]:
        return self.items

    def bump_counter_like_env_code(self, times: int) -> int:
        """Plain code (as in an env's step()) reaching a named actor synchronously."""
        counter = get_actor_sync("counter")
        for _ in range(times):
            counter.tell_sync("inc", 1)
        return counter.call_sync("get")

    async def bump_counter_async(self, times: int) -> int:
        counter = await self.job.get_actor("counter")
        for _ in range(times):
            await counter.call("inc", 1)
        return await counter.call("get")

    def pid(self) -> int:
        return os.getpid()

    def getenv(self, name: str) -> str | None:
        return os.environ.get(name)

    def crash(self, code: int) -> None:
        print(f"worker about to exit with {code}", flush=True)
        os._exit(code)

    async def spawn_grandchild(self) -> int:
        h = await self.job.spawn(Counter, name="grandchild")
        return await h.call("get")

    def echo(self, value: Any) -> Any:
        return value

    def double_in_place(self, t: Any) -> float:
        t *= 2  # decoded tensors are writable: the receive buffer is this message's own
        return float(t.sum())

    def spin_holding_gil(self) -> None:
        sys.setswitchinterval(1000)  # no other thread (not even the control thread) runs
        while True:
            pass


class SpinningCounter(Counter):
    """A counter that polls for its next request (``spin_wait_us``)."""

    spin_wait_us = 300


class BadSpin(Counter):
    spin_wait_us = -5


class FailsToStart(Actor):
    def __init__(self) -> None:
        print("loading something that is not there", flush=True)
        raise RuntimeError("cannot find the simulator binary")


class ExitMarker(Actor):
    """Writes ``path`` from an exit handler and prints a last line without a newline
    (buffered until the process flushes): what a process's ending must not lose."""

    def __init__(self, path: str) -> None:
        import atexit

        atexit.register(lambda: open(path, "w").write("exit handler ran"))
        self.path = path

    def on_stop(self) -> None:
        sys.stdout.write("last words")


class WhereAmI(Actor):
    """Says which process it is and what it was given (warm interpreter tests)."""

    def __init__(self) -> None:
        print(f"WhereAmI in pid {os.getpid()}")

    def info(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "run_dir": os.environ.get("RLMESH_RUN_DIR"),
                "marker": os.environ.get("WARM_TEST_MARKER")}
