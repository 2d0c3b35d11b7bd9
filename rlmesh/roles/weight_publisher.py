"""How a learner's weights reach the param server: one sender on the learner's event loop, so
versions arrive in order, and at most one snapshot waiting (a newer one replaces it)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

log = logging.getLogger(__name__)

Snapshot = tuple[int, dict[str, Any]]  # (policy version, weights by policy id)


class WeightPublisher:
    """Learner ``rank``'s sender to the param server ``ps`` (an actor handle). The update
    thread offers snapshots (``offer``, through ``call_soon_threadsafe``) while ``idle``;
    ``run`` sends them; the driver's ``publish`` calls ``send`` (a version the driver names)
    or ``publish`` (the next of the learner's own, in order with the update loop's)."""

    def __init__(self, ps: Any, rank: int = 0) -> None:
        self.ps, self.rank = ps, rank
        self.published = 0  # the newest version the param server took
        self.num_published = 0  # weights this learner sent the param server
        self._error: str | None = None
        self._outbox: Snapshot | None = None
        self._outbox_ready = asyncio.Event()
        self._sending = False  # a snapshot on its way to the param server
        self._published_event = asyncio.Event()
        # Called (on the loop) when a send ends with nothing waiting: the learner's chance to
        # offer a due snapshot it skipped while this one was on its way.
        self.on_idle: Callable[[], None] | None = None

    @property
    def idle(self) -> bool:
        """Nothing waiting or on its way: a snapshot now would not wait behind another."""
        return self._outbox is None and not self._sending

    def offer(self, snapshot: Snapshot) -> None:
        if self._outbox is None or snapshot[0] > self._outbox[0]:
            self._outbox = snapshot  # an older one not yet sent is superseded
        self._outbox_ready.set()

    async def run(self) -> None:
        while True:
            await self._outbox_ready.wait()
            self._outbox_ready.clear()
            snapshot, self._outbox = self._outbox, None
            if snapshot is None or snapshot[0] <= self.published:
                continue
            try:
                self._sending = True
                await self.ps.call("set_weights", *snapshot)
                self.published = snapshot[0]
                self.num_published += 1
            except Exception as exc:
                # Runners keep the weights they have; the next snapshot tries again.
                log.warning("learner %d: publishing version %d failed: %s", self.rank,
                            snapshot[0], exc)
                self._error = f"version {snapshot[0]}: {exc}"
            finally:
                self._sending = False
            self._published_event.set()
            if self._outbox is None and self.on_idle is not None:
                self.on_idle()

    async def send(self, version: int, weights: dict[str, Any]) -> None:
        """Straight to the param server (a synchronous run: no update loop publishes)."""
        await self.ps.call("set_weights", version, weights)
        self.published = max(self.published, version)
        self.num_published += 1

    async def publish(self, snapshot: Snapshot) -> int:
        """``snapshot`` sent by ``run`` after any offered before it; its version, once the
        param server has it (RuntimeError if it refused)."""
        self.offer(snapshot)
        self._error = None
        while self.published < snapshot[0]:
            self._published_event.clear()
            await self._published_event.wait()
            if self._error is not None:
                raise RuntimeError(f"the param server refused the weights ({self._error})")
        return snapshot[0]
