"""Handles to actors: request/reply with timeouts, fire-and-forget, and credit-bounded streams.

One calling form, naming a call the actor's protocol declares: ``await h.call("inc", 1)``;
``await h.tell("inc")``; ``s = h.stream("consume", window=8); await s.send(batch)``. Sync
variants for code that runs outside an event loop (env code, scripts): ``h.call_sync``,
``h.tell_sync``.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import threading
from typing import Any

import zmq

from ..wire import codec, messages as M
from ..wire.sockets import AsyncSocket, configure, connect


class RemoteError(Exception):
    """The remote method raised, or refused the request. Carries the remote traceback."""

    def __init__(self, etype: str, msg: str, tb: str = "", actor: str = "") -> None:
        where = f" in actor {actor!r}" if actor else ""
        super().__init__(f"{etype}{where}: {msg}" + (f"\n--- remote traceback ---\n{tb}" if tb else ""))
        self.etype = etype  # the remote exception's class name (its __qualname__)
        self.remote_msg = msg
        self.remote_traceback = tb
        self.actor = actor


class ActorUnavailable(Exception):
    """The actor did not answer in time, or is known to be dead."""


_call_ids = itertools.count(1)
_channel_ids = itertools.count(1)


class ActorHandle:
    """A connection from this process to one actor. Not shared across event loops."""

    def __init__(self, address: str, name: str = "", *, timeout: float | None = 60.0,
                 limits: codec.Limits = codec.Limits(), ctx: zmq.Context | None = None) -> None:
        self.address = address
        self.name = name or address
        self.default_timeout = timeout
        self.limits = limits
        self.ctx = ctx or zmq.Context.instance()
        # bytes_sent: of every request and stream item this handle sent (what a process
        # puts on the network for each peer: issue 50's per-process byte counts).
        self.stats: dict[str, int] = {"calls": 0, "dropped_replies": 0, "bytes_sent": 0}
        self._pending: dict[int, asyncio.Future[Any]] = {}
        # Timeouts: each waiting call's (deadline, method, timeout), and one timer, set for
        # the earliest deadline, instead of a timer per call (see _watch).
        self._deadlines: dict[int, tuple[float, str, float]] = {}
        self._sweeper: asyncio.TimerHandle | None = None
        self._sweep_at = math.inf
        self._streams: dict[int, StreamSender] = {}
        self._sock: AsyncSocket | None = None
        self._sync_sock: zmq.Socket | None = None
        self._sync_lock = threading.Lock()
        self._sync_rcvtimeo = -1  # ms; the sync socket's RCVTIMEO (-1: none)
        self._dead_reason: str | None = None
        self.served: frozenset[str] = frozenset()  # the calls the actor serves, once connected

    # --- async API ---

    def _socket(self) -> AsyncSocket:
        if self._sock is None:
            sock = configure(self.ctx.socket(zmq.DEALER), self.limits.max_message_bytes)
            connect(sock, self.address)
            self._sock = AsyncSocket(sock, self._on_message,
                                     zero_copy=not self.address.startswith("inproc://"))
        return self._sock

    async def connect(self, timeout: float | None = None) -> dict[str, Any]:
        """Exchange HELLO: checks the protocol version and that an actor is there; the
        reply names the actor's class and the calls it serves (``served``)."""
        reply = await self._request(M.make(M.HELLO, id=next(_call_ids)), timeout)
        self.served = frozenset(reply["calls"])
        return reply

    async def call(self, method: str, *args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
        """Call ``method`` remotely and return its result; RemoteError if it raised."""
        msg = M.make(M.CALL, id=next(_call_ids), m=method, a=list(args), k=kwargs)
        reply = await self._request(msg, timeout)
        return reply.get("r")

    async def tell(self, method: str, *args: Any, **kwargs: Any) -> None:
        """Send without waiting for a result; waits only for room in the send queue."""
        self._check_alive()
        await self._socket().send(codec.encode(M.make(M.TELL, m=method, a=list(args), k=kwargs)))

    def stream(self, method: str, window: int = 8) -> "StreamSender":
        """A channel whose items are passed, in order, to ``method(item)`` on the actor.

        At most ``window`` items are in flight; ``send`` waits for credit beyond that.
        """
        sender = StreamSender(self, method, window)
        self._streams[sender.channel] = sender
        return sender

    async def _request(self, msg: dict[str, Any], timeout: float | None) -> dict[str, Any]:
        if self._dead_reason is not None:
            self._check_alive()
        sock = self._sock or self._socket()
        fut = sock.loop.create_future()
        call_id = msg["id"]
        self._pending[call_id] = fut
        timeout = self.default_timeout if timeout is None else timeout
        if timeout is not None:
            self._watch(sock.loop, call_id, msg.get("m", msg["t"]), timeout)
        try:
            frames = codec.encode(msg)
            self.stats["bytes_sent"] += frames_nbytes(frames)
            if not sock.send_nowait(frames):
                await sock.send(frames)  # the send queue is full: wait for room
            return await fut
        finally:
            self._pending.pop(call_id, None)
            self._deadlines.pop(call_id, None)

    def _watch(self, loop: asyncio.AbstractEventLoop, call_id: int, what: str,
               timeout: float) -> None:
        """Fail the call if no reply came within ``timeout`` seconds.

        A timer set and cancelled per call cost more than the rest of the handle's side
        of a call; calls are watched by one timer instead, set for the earliest deadline.
        While calls keep being answered in time, it fires once per ``timeout``.
        """
        deadline = loop.time() + timeout
        self._deadlines[call_id] = (deadline, what, timeout)
        if deadline < self._sweep_at:
            if self._sweeper is not None:
                self._sweeper.cancel()
            self._sweep_at = deadline
            self._sweeper = loop.call_at(deadline, self._sweep, loop)

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        self._sweeper, self._sweep_at = None, math.inf
        now = loop.time()
        earliest = math.inf
        for call_id, (deadline, what, timeout) in list(self._deadlines.items()):
            if deadline > now:
                earliest = min(earliest, deadline)
                continue
            del self._deadlines[call_id]
            fut = self._pending.get(call_id)
            if fut is not None and not fut.done():
                fut.set_exception(ActorUnavailable(
                    f"actor {self.name!r} at {self.address} did not answer {what!r} "
                    f"within {timeout} s"))
        if earliest < math.inf:
            self._sweep_at = earliest
            self._sweeper = loop.call_at(earliest, self._sweep, loop)

    def _on_message(self, frames: list[Any]) -> None:
        try:
            msg = M.validate(codec.decode(frames, self.limits))
        except (codec.DecodeError, M.ProtocolError) as exc:
            self.stats["dropped_replies"] += 1
            if isinstance(exc, M.VersionMismatch):
                for fut in self._pending.values():  # the peer will never understand us
                    if not fut.done():
                        fut.set_exception(exc)
            return
        kind = msg["t"]
        if kind == M.CREDIT or (kind == M.ERROR and "ch" in msg):
            sender = self._streams.get(msg.get("ch"))  # type: ignore[arg-type]
            if sender is not None:
                sender._on_control(msg)
            return
        fut = self._pending.get(msg.get("id"))  # type: ignore[arg-type]
        if fut is None or fut.done():
            self.stats["dropped_replies"] += 1  # late reply after a timeout
            return
        if kind == M.ERROR:
            if msg["etype"] == "VersionMismatch":  # keep the remote's wording: it names both
                fut.set_exception(M.VersionMismatch(None, text=msg["msg"]))
            else:
                fut.set_exception(RemoteError(msg["etype"], msg["msg"], msg.get("tb", ""), self.name))
        else:
            self.stats["calls"] += 1
            fut.set_result(msg)

    def mark_dead(self, reason: str, permanent: bool = False) -> None:
        """Fail every waiting call now (the supervisor saw the process die).

        A restarted actor comes back at the same address, so the handle stays usable
        unless ``permanent`` (no more restarts).
        """
        if permanent:
            self._dead_reason = reason
        err = ActorUnavailable(f"actor {self.name!r} died: {reason}")
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(err)
        for sender in self._streams.values():
            sender._fail(err)

    def _check_alive(self) -> None:
        if self._dead_reason is not None:
            raise ActorUnavailable(f"actor {self.name!r} is gone: {self._dead_reason}")

    def retarget(self, address: str) -> None:
        """Reach the actor at ``address`` from now on (it was started again elsewhere);
        calls waiting on the old address fail as if it had died."""
        self.mark_dead(f"moved to {address}")
        self.close()
        self.address = address

    def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper, self._sweep_at = None, math.inf
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._sync_sock is not None:
            self._sync_sock.close(linger=0)
            self._sync_sock = None

    # --- sync API: a blocking socket of its own, for code outside the event loop ---

    def call_sync(self, method: str, *args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
        """Blocking ``call``; safe from any thread (calls are serialised)."""
        call_id = next(_call_ids)
        msg = M.make(M.CALL, id=call_id, m=method, a=list(args), k=kwargs)
        timeout = self.default_timeout if timeout is None else timeout
        with self._sync_lock:
            sock = self._sync_socket()
            # A blocking receive with the timeout as the socket's RCVTIMEO, as a plain REQ
            # client waits: no poller built per call.
            rcvtimeo = -1 if timeout is None else max(1, int(timeout * 1000))
            if rcvtimeo != self._sync_rcvtimeo:
                sock.setsockopt(zmq.RCVTIMEO, rcvtimeo)
                self._sync_rcvtimeo = rcvtimeo
            sock.send_multipart(codec.encode(msg), copy=False)
            while True:
                try:
                    frames = sock.recv_multipart(copy=False)
                except zmq.Again:
                    # Our socket may now hold a late reply: start afresh next time.
                    sock.close(linger=0)
                    self._sync_sock = None
                    raise ActorUnavailable(
                        f"actor {self.name!r} did not answer {method!r} within {timeout} s"
                    ) from None
                reply = M.validate(codec.decode(frames, self.limits))
                if reply.get("id") == call_id:
                    break
        if reply["t"] == M.ERROR:
            raise RemoteError(reply["etype"], reply["msg"], reply.get("tb", ""), self.name)
        return reply.get("r")

    def tell_sync(self, method: str, *args: Any, **kwargs: Any) -> None:
        with self._sync_lock:
            self._sync_socket().send_multipart(
                codec.encode(M.make(M.TELL, m=method, a=list(args), k=kwargs)), copy=False)

    def _sync_socket(self) -> zmq.Socket:
        if self._sync_sock is None:
            sock = configure(self.ctx.socket(zmq.DEALER), self.limits.max_message_bytes)
            connect(sock, self.address)
            self._sync_sock, self._sync_rcvtimeo = sock, -1
        return self._sync_sock

    def __repr__(self) -> str:
        return f"ActorHandle({self.name!r}, {self.address!r})"


class StreamSender:
    """Sends items to one actor method with at most ``window`` unacknowledged."""

    def __init__(self, handle: ActorHandle, method: str, window: int) -> None:
        if window < 1:
            raise ValueError("stream window must be at least 1")
        self.handle = handle
        self.method = method
        self.window = window
        self.channel = next(_channel_ids)
        self.credits = window
        self.sent = 0
        self.bytes_sent = 0
        self._seq = 0
        self._waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None

    @property
    def in_flight(self) -> int:
        return self.window - self.credits

    async def send(self, item: Any) -> None:
        """Send one item, first waiting for credit if ``window`` items are in flight."""
        while self.credits <= 0 and self._error is None:
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        self._raise_pending()
        self.handle._check_alive()
        self.credits -= 1
        msg = M.make(M.STREAM, ch=self.channel, seq=self._seq, m=self.method, p=item)
        self._seq += 1
        frames = codec.encode(msg)
        size = frames_nbytes(frames)
        self.bytes_sent += size
        self.handle.stats["bytes_sent"] += size
        await self.handle._socket().send(frames)
        self.sent += 1

    async def flush(self) -> None:
        """Wait until the actor has handled every item sent so far."""
        while self.credits < self.window and self._error is None:
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        self._raise_pending()

    def _raise_pending(self) -> None:
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def _on_control(self, msg: dict[str, Any]) -> None:
        if msg["t"] == M.CREDIT:
            self.credits = min(self.window, self.credits + msg["n"])
        else:
            # A failed item still returns its credit in a CREDIT message, except one the
            # actor dropped for arriving past its backlog bound: that one comes back here.
            if msg["etype"] == "Backpressure":
                self.credits = min(self.window, self.credits + 1)
            self._error = RemoteError(msg["etype"], msg["msg"], msg.get("tb", ""), self.handle.name)
        self._wake()

    def _fail(self, err: BaseException) -> None:
        self._error = err
        self._wake()

    def abort(self, reason: str) -> None:
        """Fail a ``send`` waiting for credit (and the next one) with ActorUnavailable: the
        receiver restarted, so the credit of the items it had will never come back."""
        self._fail(ActorUnavailable(f"stream to {self.handle.name!r} aborted: {reason}"))

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def close(self) -> None:
        self.handle._streams.pop(self.channel, None)


def frames_nbytes(frames: Any) -> int:
    """Bytes of a message's frames (bytes, memoryviews, arrays) as they go on the wire."""
    return sum(memoryview(f).nbytes for f in frames)
