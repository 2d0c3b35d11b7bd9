"""Two roles no shipped algorithm has, for tests/integration/test_added_role.py: a weights
relay (the next issue's node relay in miniature) that subscribes to the param server and
forwards each version it is pushed to its sinks, and a tap that counts what reaches it."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from rlmesh.runtime import Actor, ActorUnavailable
from rlmesh.runtime.protocol import Protocol


class WeightsRelay(Actor):
    """Subscribes to the actor named ``param_server`` (None: to nothing) and, once told
    ``start_streaming``, sends ``{"relay": its name, "version": v}`` for each version pushed
    to it round robin to its sinks' ``add_fragment``."""

    protocol = Protocol(calls=("take_weights", "start_streaming", "reset_streams", "stats"),
                        test_hooks=("pid",))

    def __init__(self, param_server: str | None, index: int) -> None:
        self.ps_name, self.index = param_server, index
        self.versions: list[int] = []  # every version pushed here, in order
        self.pushed: bool | None = None  # the param server's answer to subscribe
        self.resets = 0
        self._queue: asyncio.Queue[int] = asyncio.Queue()
        self._sinks: list[str] = []
        self._senders: list[Any] | None = None
        self._task: asyncio.Task[None] | None = None
        self._sent = 0

    async def on_start(self) -> None:
        # Also after a restart: the new process subscribes again, as a runner does.
        if self.ps_name is not None:
            self._subscribing = asyncio.ensure_future(self._subscribe())

    async def _subscribe(self) -> None:
        """The param server finds a subscriber by its name, which the driver knows once this
        actor has answered its spawn: until then it answers ``pushed: False``; ask again."""
        ps = await self.job.get_actor(self.ps_name)
        for _ in range(100):
            self.pushed = (await ps.call("subscribe", self.name, {}))["pushed"]
            if self.pushed:
                return
            await asyncio.sleep(0.1)

    async def on_stop(self) -> None:
        for task in (self._task, getattr(self, "_subscribing", None)):
            if task is not None:
                task.cancel()

    def take_weights(self, got: dict[str, list[Any]]) -> None:
        """The param server's push, ``{policy_id: [version, weights]}``."""
        version = max(v for v, _ in got.values())
        self.versions.append(version)
        self._queue.put_nowait(version)

    async def start_streaming(self, sinks: list[str], window: int) -> None:
        self._sinks, self._window = list(sinks), window
        if self._task is None:
            self._task = asyncio.ensure_future(self._forward())

    def reset_streams(self, reason: str) -> None:
        """A sink restarted: what was in flight to it is lost; new streams for the rest."""
        self.resets += 1
        for sender in self._senders or ():
            sender.abort(reason)

    async def _forward(self) -> None:
        while True:
            item = {"relay": self.name, "version": await self._queue.get()}
            while True:  # the item in hand goes out, on new streams if a sink restarted
                if self._senders is None:
                    handles = [await self.job.get_actor(n, timeout=60) for n in self._sinks]
                    self._senders = [h.stream("add_fragment", self._window) for h in handles]
                try:
                    await self._senders[self._sent % len(self._senders)].send(item)
                    self._sent += 1
                    break
                except ActorUnavailable:
                    for sender in self._senders:
                        sender.close()
                    self._senders = None

    def stats(self) -> dict[str, Any]:
        return {"versions": self.versions, "pushed": self.pushed, "resets": self.resets,
                "sent": self._sent, "sinks": self._sinks}

    def pid(self) -> int:
        return os.getpid()


class Tap(Actor):
    """Counts the items streamed to it, by sender."""

    protocol = Protocol(streams=("add_fragment",), calls=("stats",), test_hooks=("pid",))

    def __init__(self) -> None:
        self.got: dict[str, list[int]] = {}

    def add_fragment(self, item: dict[str, Any]) -> None:
        self.got.setdefault(item["relay"], []).append(int(item["version"]))

    def stats(self) -> dict[str, Any]:
        return {"got": self.got}

    def pid(self) -> int:
        return os.getpid()
