"""Actors for the ``rlmesh stack`` integration tests: idle, blocking the loop, holding the GIL."""

from __future__ import annotations

import sys
import time

from rlmesh.runtime import Actor


class Idle(Actor):
    """Does nothing: every copy of it has the same stacks."""

    def ping(self) -> str:
        return "pong"


class Sleeper(Actor):
    """Blocks its event loop with a blocking call in async code (the GIL stays free)."""

    async def block(self, seconds: float) -> None:
        time.sleep(seconds)


class Spinner(Actor):
    """Spins in pure Python and never lets another thread take the GIL."""

    def spin_holding_gil(self) -> None:
        sys.setswitchinterval(1000)  # a waiting thread asks for the GIL after 1000 s
        while True:
            pass
