"""The parameter server: the newest weights of each policy, by policy id, with the version
they were published under, announced to the runners that subscribed (pushed, never polled).

Learners (or the driver, for a learner in its process) publish; each runner subscribes
once (and again after a restart), is pushed the current weights at once, and from then on
is sent every newer version as it is published. Pushes in flight are capped over all
subscribers (a thousand runners subscribing together are sent their weights a few dozen at
a time), and the server counts the bytes it sends by version. Backpressure: at most one push in flight per
runner, and a runner still taking one is later sent only the newest version, never a queue.
How often versions come is the publisher's choice (``broadcast_interval``: a learner
publishes every N updates). The version before the newest is kept too: a batch sampled ahead
(``sample_async``) acts with weights no newer than the driver's version when it started, and
asks for them (``get_weights(..., up_to)``) when a newer push overtook them. A synchronous
sample names the newest version the same way, so a runner whose push is still waiting
behind the one before (one in flight per runner) asks for it rather than act with older.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import numpy as np

from rlmesh.runtime import Actor, ActorUnavailable, RemoteError
from rlmesh.runtime.protocol import Protocol
from rlmesh.wire.sockets import raise_fd_limit

log = logging.getLogger(__name__)

PUSH_TIMEOUT_S = 120.0  # a runner busy in a long env step answers a push when it is done
LOOKUP_TIMEOUT_S = 1.0  # a subscriber's name: the driver's runners are known at once
# Pushes on their way at once, over all subscribers: each holds a copy of the weights in the
# sockets' buffers until it is taken, so 1,000 runners of a 10 MB model would hold 10 GB; the
# rest wait their turn (always for the newest version: a waiting one never sends an old one).
MAX_PUSHES_IN_FLIGHT = 32
BYTES_BY_VERSION_KEPT = 16  # the newest versions whose bytes sent ``stats`` reports
PUSH_TRIES = 4  # a push that found its runner busy or gone is tried this often
PUSH_RETRY_S = 0.5  # the wait before try k+1 is k times this
FD_RESERVE = 256  # descriptors beyond the subscribers' (files, the driver's own sockets)


class _Subscriber:
    """What the param server knows of one subscription of a runner (a restarted runner
    subscribes again: a new one): the newest version of each policy it has been sent (or
    held when it subscribed), and whether a push is on its way."""

    def __init__(self, sent: dict[str, int]) -> None:
        self.sent = sent
        self.busy = False
        self.handle: Any = None  # the driver's own handle, where the param server is in it


class ParamServer(Actor):
    """Holds ``{policy_id: (version, weights)}``; weights are ``{name: numpy array}``."""

    protocol = Protocol(calls=("set_weights", "subscribe", "unsubscribe", "get_weights",
                               "remove_policy", "version", "stats"))

    def __init__(self) -> None:
        self._weights: dict[str, tuple[int, dict[str, np.ndarray]]] = {}
        self._previous: dict[str, tuple[int, dict[str, np.ndarray]]] = {}
        self._subscribers: dict[str, _Subscriber] = {}
        self._pushing: set[asyncio.Task[None]] = set()
        self.fetches = 0  # replies to get_weights that carried weights (asked, not pushed)
        self.pushes = 0  # pushes a runner took in (each: the newer policies' weights)
        self.subscriptions = 0  # subscribe calls (a restarted runner subscribes again)
        self.failed_pushes = 0
        # Weight bytes sent (pushes and replies that carried weights), in all and by version:
        # what a broadcast costs this process (issue 50's "bytes leaving the param server").
        self.bytes_sent = 0
        self.bytes_by_version: dict[int, int] = {}
        self._push_slots = asyncio.Semaphore(MAX_PUSHES_IN_FLIGHT)

    async def set_weights(self, version: int, weights: dict[str, dict[str, Any]]) -> None:
        """Publish ``{policy_id: weights}`` as ``version``, which must be newer than each
        policy's current one, and announce it to every subscriber that holds an older one.
        Returns once the pushes that could start have left (not once they are taken): a
        runner still answering the push before waits for the next one until it has, so a
        sample call can reach it first (the sample names the version it must act with)."""
        self._store(version, weights)
        started = [self._kick(name) for name in list(self._subscribers)]
        if any(started):
            await asyncio.sleep(0)  # each push task's first step sends its message

    def _store(self, version: int, weights: dict[str, dict[str, Any]]) -> None:
        """Keep ``{policy_id: weights}`` as ``version`` (no announcement)."""
        for pid, w in weights.items():
            current = self._weights.get(pid, (0, None))[0]
            if version <= current:
                raise ValueError(f"weights version {version} of {pid!r} is not newer than {current}")
            if pid in self._weights:
                _check_like(pid, w, self._weights[pid][1])
        # Arrays decoded from the wire are views of the receive buffer: keeping them keeps
        # that buffer, which is what we want (one message's memory, no copy).
        for pid, w in weights.items():
            if pid in self._weights:
                self._previous[pid] = self._weights[pid]
            self._weights[pid] = (version, dict(w))

    async def subscribe(self, name: str, have: dict[str, int]) -> dict[str, Any]:
        """Runner ``name`` (its actor name) holds ``have`` (policy id -> version) and wants
        every newer version pushed to its ``take_weights``. The reply is small,
        ``{"weights": {}, "pushed": True, "versions": {policy id: newest version}}``: what is
        newer than ``have`` follows at once as a push, under the cap on pushes in flight,
        so a thousand runners subscribing together are sent their weights a few dozen at a
        time, not 1,000 copies at once (the runner waits for that push before it acts). A
        runner that restarted subscribes again: its old record goes. A runner this server
        cannot find by name (an unnamed actor of another process) is told ``pushed: False``
        with the newer weights in the reply, and asks with ``get_weights`` from then on."""
        self.subscriptions += 1
        raise_fd_limit(2 * len(self._subscribers) + FD_RESERVE)  # a socket (two fds) each
        sub = self._subscribers[name] = _Subscriber(dict(have))
        try:
            sub.handle = await self.job.get_actor(name, timeout=LOOKUP_TIMEOUT_S)
        except KeyError:
            if self._subscribers.get(name) is sub:
                del self._subscribers[name]
            got = self._newer(have)
            self._count_sent(got)
            return {"weights": got, "pushed": False}
        except ActorUnavailable:
            pass  # named but too busy to answer a first contact now: the push finds it later
        if self._subscribers.get(name) is sub:
            self._kick(name)
        return {"weights": {}, "pushed": True,
                "versions": {pid: v for pid, (v, _) in self._weights.items()}}

    def get_weights(self, have: dict[str, int], up_to: int | None = None) -> dict[str, list[Any]]:
        """``{policy_id: [version, weights]}`` for each policy of ``have`` (policy id ->
        version held) whose published version is newer; {} when none is. With ``up_to``,
        the newest version not above it (of the two kept), if that is newer than held.
        For those who ask rather than subscribe, and for a batch sampled ahead."""
        out = self._newer(have, up_to)
        if out:
            self.fetches += 1
            self._count_sent(out)
        return out

    def unsubscribe(self, name: str) -> None:
        """Runner ``name`` takes its weights elsewhere now (its node's relay is back): no
        more pushes to it from here."""
        self._subscribers.pop(name, None)

    def _count_sent(self, got: dict[str, list[Any]]) -> None:
        for version, weights in got.values():
            size = sum(int(getattr(a, "nbytes", 0)) for a in weights.values())
            self.bytes_sent += size
            self.bytes_by_version[version] = self.bytes_by_version.get(version, 0) + size
        while len(self.bytes_by_version) > BYTES_BY_VERSION_KEPT:
            del self.bytes_by_version[min(self.bytes_by_version)]

    def _newer(self, have: dict[str, int], up_to: int | None = None) -> dict[str, list[Any]]:
        out = {}
        for pid, held in have.items():
            entry = self._weights.get(pid)
            if entry is not None and up_to is not None and entry[0] > up_to:
                entry = self._previous.get(pid)
                if entry is not None and entry[0] > up_to:
                    entry = None
            if entry is not None and entry[0] > held:
                out[pid] = [entry[0], entry[1]]
        return out

    # --- pushing: one task per subscriber while it has something newer to be sent ---

    def _due(self, sub: _Subscriber) -> dict[str, list[Any]]:
        """The newest weights of every policy newer than what ``sub`` was sent (a policy it
        never had included: one added while training)."""
        return {pid: [v, w] for pid, (v, w) in self._weights.items() if v > sub.sent.get(pid, -1)}

    def _kick(self, name: str) -> bool:
        sub = self._subscribers.get(name)
        if sub is None or sub.busy or not self._due(sub):
            return False
        sub.busy = True
        task = asyncio.ensure_future(self._push(name, sub))
        self._pushing.add(task)
        task.add_done_callback(self._pushing.discard)
        return True

    async def _push(self, name: str, sub: _Subscriber) -> None:
        """Send ``name`` the newest weights until it holds them; one push at a time. A push
        that fails (the runner restarting, or too busy to answer) is tried again at the next
        publication; a restarted runner subscribes again and gets the current weights."""
        tries = 0
        try:
            while self._subscribers.get(name) is sub:
                due = self._due(sub)
                if not due:
                    return
                try:
                    handle = sub.handle or await self.job.get_actor(name)
                    async with self._push_slots:
                        due = self._due(sub)  # the newest, after a wait for a slot
                        if not due or self._subscribers.get(name) is not sub:
                            return
                        self._count_sent(due)
                        await handle.call("take_weights", due, timeout=PUSH_TIMEOUT_S)
                except (ActorUnavailable, RemoteError, KeyError) as exc:
                    self.failed_pushes += 1
                    log.debug("param server: no push to %s: %s", name, str(exc).splitlines()[0])
                    tries += 1
                    if isinstance(exc, RemoteError) or tries >= PUSH_TRIES:
                        return  # the next publication tries again
                    # Too busy to answer, or restarting (then it subscribes again and this
                    # record goes): a runner left without a version until the next one
                    # would act with older weights for a whole broadcast interval.
                    await asyncio.sleep(PUSH_RETRY_S * tries)
                    continue
                self.pushes += 1
                for pid, (version, _) in due.items():
                    sub.sent[pid] = max(sub.sent.get(pid, -1), version)
        finally:
            sub.busy = False
            if self._subscribers.get(name) is not sub:  # it subscribed again meanwhile
                self._kick(name)

    async def on_stop(self) -> None:
        for task in list(self._pushing):  # the runners stop too: nothing to finish
            task.cancel()

    def remove_policy(self, policy_id: str) -> None:
        """Forget a policy removed from the run."""
        self._weights.pop(policy_id, None)
        self._previous.pop(policy_id, None)
        for sub in self._subscribers.values():
            sub.sent.pop(policy_id, None)

    def version(self, policy_id: str | None = None) -> int:
        """The newest version of ``policy_id`` (of any policy when None); 0 before any."""
        if policy_id is not None:
            return self._weights.get(policy_id, (0, None))[0]
        return max((v for v, _ in self._weights.values()), default=0)

    def latest(self, policy_id: str) -> tuple[int, dict[str, np.ndarray]] | None:
        """``(version, weights)`` of ``policy_id`` (None before any), for a reader in this
        process (the driver's own policy copies): no socket, no copy."""
        return self._weights.get(policy_id)

    def stats(self) -> dict[str, Any]:
        return {"version": self.version(), "fetches": self.fetches, "pushes": self.pushes,
                "subscriptions": self.subscriptions,
                "failed_pushes": self.failed_pushes, "subscribers": sorted(self._subscribers),
                "pushes_in_flight": sum(sub.busy for sub in self._subscribers.values()),
                "bytes_sent": self.bytes_sent,
                "bytes_by_version": {str(v): n for v, n in self.bytes_by_version.items()},
                "versions": {pid: v for pid, (v, _) in self._weights.items()}}


def _check_like(pid: str, weights: Any, held: dict[str, Any]) -> None:
    """ValueError unless ``weights`` has the names, shapes and dtypes of the weights held
    for ``pid``: a policy's model keeps its shape while the run lasts (one removed and added
    again starts afresh), so weights that differ would only fail in every runner they reach."""
    if not isinstance(weights, dict) or set(weights) != set(held):
        names = sorted(weights) if isinstance(weights, dict) else type(weights).__name__
        raise ValueError(f"weights of {pid!r}: expected the arrays {sorted(held)}, got {names}")
    for name, old in held.items():
        new = weights[name]
        if getattr(new, "shape", None) != getattr(old, "shape", None) or \
                getattr(new, "dtype", None) != getattr(old, "dtype", None):
            raise ValueError(f"weights of {pid!r}: {name!r} is {_describe(new)}, not "
                             f"{_describe(old)} as before")


def _describe(value: Any) -> str:
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    return f"{dtype}{list(shape)}" if shape is not None else type(value).__name__
