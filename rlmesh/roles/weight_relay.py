"""A weight relay: the param server's stand-in on one node, so that a new weights version
crosses the network once per node, not once per runner (issue 50: "weights by tree").

A relay is a ParamServer whose publisher is the actor above it (``upstream``: the param
server, or another relay when relays are many and form a tree of degree
``weights_relay_fanout``). It subscribes there as a runner would, keeps the newest two
versions as the param server does, and serves its node's runners the same calls
(``subscribe``, ``get_weights``, pushes to ``take_weights``), over its node's own sockets.
A sample naming a version the relay has not been pushed yet (``get_weights(..., up_to)``)
makes it ask upstream once for everyone asking.

The relay also answers for its node's runners when the driver asks something of each of
them (``call_runners``: one message per node instead of one per runner), so the driver's
messages per iteration grow with the nodes, not with the runners.

A relay that dies is restarted by the driver's supervisor (one line); the new one subscribes
upstream and tells its node's runners (``weights_source_back``), which subscribe to it again.
Meanwhile a runner whose relay does not answer takes its weights from the param server
(``RunnerSpec.weights_fallback``), so nothing waits for a relay.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from rlmesh.roles.paramserver import ParamServer
from rlmesh.roles.specs import RelaySpec
from rlmesh.runtime import ActorUnavailable, RemoteError
from rlmesh.runtime.protocol import Protocol

log = logging.getLogger(__name__)

UPSTREAM_TIMEOUT_S = 10.0  # a call to the actor above: the param server answers at once
JOIN_RETRY_S = 0.2  # between subscriptions upstream that could not be pushed to yet
RUNNER_LOOKUP_S = 2.0  # a runner of this node by name (the driver registered it here)
# A version a sample names that has not reached this relay: the param server pushed it when
# it was published, so it is usually on its way; it is asked for only after this long (a
# second copy across the network otherwise).
PUSH_WAIT_S = 1.0


class WeightRelay(ParamServer):
    """Takes every version from ``upstream`` and pushes it on to this node's runners."""

    protocol = Protocol(calls=("subscribe", "unsubscribe", "get_weights", "take_weights",
                               "version", "stats", "call_runners"))

    def __init__(self, spec: dict[str, Any]) -> None:
        super().__init__()
        own = RelaySpec.from_data(spec)
        self.upstream, self.node, self.index = own.upstream, own.node, own.index
        self.runner_names = list(own.runners)
        self.policy_ids = list(own.policies)
        self._up: Any = None
        self._joined = asyncio.Event()
        self._catching_up = asyncio.Lock()
        self._arrived = asyncio.Event()  # set (and replaced) at each newer version taken
        self._join_task: asyncio.Task[None] | None = None
        self.upstream_pushes = 0  # versions pushed to this relay by its upstream
        self.upstream_fetches = 0  # versions it asked for (a sample ahead of the pushes)
        self.bytes_received = 0
        self.runner_calls = 0  # call_runners messages (each: one call on each named runner)

    async def on_start(self) -> None:
        self._join_task = asyncio.ensure_future(self._join())

    async def on_stop(self) -> None:
        if self._join_task is not None:
            self._join_task.cancel()
        await super().on_stop()

    async def set_weights(self, version: int, weights: dict[str, dict[str, Any]]) -> None:
        raise RuntimeError(f"{self.name} relays the weights of {self.upstream}; publish there")

    # --- upstream ---

    def _held(self) -> dict[str, int]:
        held = {pid: -1 for pid in self.policy_ids}
        held.update({pid: v for pid, (v, _) in self._weights.items()})
        return held

    async def _join(self) -> None:
        """Subscribe upstream until it can push here (it finds this relay by the name the
        driver registers once the relay answers, so the first try may be too early), then
        tell this node's runners that a relay serves them (a restarted one: again)."""
        while True:
            try:
                up = await self.job.get_actor(self.upstream, timeout=UPSTREAM_TIMEOUT_S)
                reply = await up.call("subscribe", self.name, self._held(),
                                      timeout=UPSTREAM_TIMEOUT_S)
            except (ActorUnavailable, KeyError, RemoteError) as exc:
                log.warning("%s: %s does not answer (%s); trying again", self.name,
                            self.upstream, str(exc).splitlines()[0])
                await asyncio.sleep(1.0)
                continue
            self._up = up
            self._take(reply["weights"], pushed=False)
            if reply["pushed"]:
                break
            await asyncio.sleep(JOIN_RETRY_S)
        self._joined.set()
        await self._tell_runners()

    async def _tell_runners(self) -> None:
        """``weights_source_back`` to each runner of this node that is up (a runner not
        started yet subscribes here when it first samples)."""
        names = [n for n in self.runner_names if self.job.run_dir.lookup_name(n)]

        async def tell(name: str) -> None:
            try:
                runner = await self.job.get_actor(name, timeout=RUNNER_LOOKUP_S)
                await runner.call("weights_source_back", self.name, timeout=UPSTREAM_TIMEOUT_S)
            except (ActorUnavailable, KeyError, RemoteError) as exc:
                log.debug("%s: %s not told: %s", self.name, name, str(exc).splitlines()[0])

        await asyncio.gather(*(tell(n) for n in names))

    def take_weights(self, got: dict[str, list[Any]]) -> None:
        """The upstream's push: kept as the param server keeps a publication, and pushed on
        to every subscriber that holds less."""
        self.upstream_pushes += 1
        self._take(got, pushed=True)

    def _take(self, got: dict[str, list[Any]], pushed: bool) -> None:
        newer = False
        for pid, (version, weights) in got.items():
            if version > self._weights.get(pid, (-1, None))[0]:
                self.bytes_received += sum(int(getattr(a, "nbytes", 0)) for a in weights.values())
                self._store(version, {pid: weights})
                newer = True
        if newer:
            self._arrived.set()
            self._arrived = asyncio.Event()
            for name in list(self._subscribers):
                self._kick(name)

    async def get_weights(self, have: dict[str, int],  # type: ignore[override]
                          up_to: int | None = None) -> dict[str, list[Any]]:
        """As the param server's; a version asked for (``up_to``) that has not reached this
        relay yet is fetched upstream first (once, for every runner asking meanwhile)."""
        if up_to is not None and self.version() < up_to:
            await self._catch_up(up_to)
        return super().get_weights(have, up_to)

    async def _catch_up(self, up_to: int) -> None:
        async with self._catching_up:
            deadline = asyncio.get_running_loop().time() + PUSH_WAIT_S
            while self.version() < up_to:  # on its way, pushed: wait a little for it
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0:
                    break
                try:
                    await asyncio.wait_for(self._arrived.wait(), left)
                except asyncio.TimeoutError:
                    break
            if self.version() >= up_to:
                return
            if not self._joined.is_set():
                await asyncio.wait_for(self._joined.wait(), UPSTREAM_TIMEOUT_S)
            got = await self._up.call("get_weights", self._held(), up_to,
                                      timeout=UPSTREAM_TIMEOUT_S)
            self.upstream_fetches += bool(got)
            self._take(got, pushed=False)

    # --- the driver's calls on this node's runners ---

    async def call_runners(self, method: str, args: list[Any] | None = None,
                           kwargs: dict[str, Any] | None = None, timeout: float | None = None,
                           names: list[str] | None = None) -> list[list[Any]]:
        """``method(*args, **kwargs)`` on each runner ``names`` (default: this node's), at
        once: ``[name, "ok", reply]``, ``[name, "unavailable", why]`` (down or no answer
        within ``timeout``) or ``[name, "error", "<type>: <message>"]`` each, in order."""
        args, kwargs = list(args or ()), dict(kwargs or {})
        self.runner_calls += 1

        async def one(name: str) -> list[Any]:
            try:
                runner = await self.job.get_actor(name, timeout=RUNNER_LOOKUP_S)
                return [name, "ok", await runner.call(method, *args, timeout=timeout, **kwargs)]
            except (ActorUnavailable, KeyError) as exc:
                return [name, "unavailable", str(exc).splitlines()[0]]
            except RemoteError as exc:
                return [name, "error", f"{exc.etype}: {exc.remote_msg}"]

        return list(await asyncio.gather(*(one(n) for n in names or self.runner_names)))

    def stats(self) -> dict[str, Any]:
        return {**super().stats(), "node": self.node, "upstream": self.upstream,
                "joined": self._joined.is_set(), "upstream_pushes": self.upstream_pushes,
                "upstream_fetches": self.upstream_fetches, "bytes_received": self.bytes_received,
                "runner_calls": self.runner_calls}
