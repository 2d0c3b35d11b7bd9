"""ZeroMQ sockets for rlmesh: addresses by URL scheme, limits, and an asyncio wrapper.

The asyncio wrapper drives a plain zmq socket from the event loop's reader callback and
drains every ready message per wake-up, which costs less per message than zmq.asyncio.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, Callable, Sequence

import zmq

from .codec import DEFAULT_MAX_MESSAGE_BYTES

SCHEMES = ("inproc", "ipc", "tcp")


def scheme_of(address: str) -> str:
    """The transport of an address: ``inproc``, ``ipc`` or ``tcp``."""
    scheme, sep, _ = address.partition("://")
    if not sep or scheme not in SCHEMES:
        raise ValueError(f"address {address!r} must start with one of "
                         + ", ".join(s + "://" for s in SCHEMES))
    return scheme


def configure(sock: zmq.Socket, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
              hwm: int = 1000) -> zmq.Socket:
    """Apply rlmesh's socket defaults: bounded queues, size limit, no linger on close."""
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, hwm)
    sock.setsockopt(zmq.RCVHWM, hwm)
    # libzmq drops the connection of a peer that sends a larger frame; the codec's
    # limits then bound the whole message.
    sock.setsockopt(zmq.MAXMSGSIZE, max_message_bytes)
    return sock


def bind(sock: zmq.Socket, address: str) -> str:
    """Bind and return the address peers should connect to (tcp port 0 resolved)."""
    scheme_of(address)
    if address.startswith("tcp://") and address.endswith(":0"):
        address = address[:-2] + ":*"
    sock.bind(address)
    return sock.getsockopt_string(zmq.LAST_ENDPOINT) if address.startswith("tcp://") else address


class AsyncSocket:
    """A zmq socket driven by the running event loop.

    Received messages are passed to ``on_message(frames)`` synchronously, in order, as
    lists of ``zmq.Frame``. ``send`` waits for room when the high-water mark is reached.
    """

    def __init__(self, sock: zmq.Socket, on_message: Callable[[list[Any]], None] | None,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.sock = sock
        self.on_message = on_message
        self.loop = loop or asyncio.get_running_loop()
        self._fd = sock.getsockopt(zmq.FD)
        self._send_waiters: deque[asyncio.Future[None]] = deque()
        self._drain_scheduled = False
        self._closed = False
        self.loop.add_reader(self._fd, self._drain)
        self._schedule_drain()  # messages may already be waiting; the FD is edge-triggered

    def _schedule_drain(self) -> None:
        if not self._drain_scheduled and not self._closed:
            self._drain_scheduled = True
            self.loop.call_soon(self._drain)

    def _drain(self) -> None:
        self._drain_scheduled = False
        if self._closed:
            return
        sock = self.sock
        events = sock.getsockopt(zmq.EVENTS)
        if events & zmq.POLLOUT and self._send_waiters:
            self._wake_senders()
        budget = 256  # yield to other callbacks after this many messages
        while events & zmq.POLLIN and budget:
            frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
            budget -= 1
            if self.on_message is not None:
                self.on_message(frames)
            if self._closed:
                return
            events = sock.getsockopt(zmq.EVENTS)
        if not budget and events & zmq.POLLIN:
            self._schedule_drain()

    def _wake_senders(self) -> None:
        # Wake them all: each retries, and those that still find no room queue again.
        waiters, self._send_waiters = self._send_waiters, deque()
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def send_nowait(self, frames: Sequence[Any], copy: bool = False) -> bool:
        """Send if the socket has room right now; return False if it would block."""
        try:
            self.sock.send_multipart(frames, zmq.NOBLOCK, copy=copy)
        except zmq.Again:
            return False
        finally:
            if self.sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                self._schedule_drain()
        return True

    async def send(self, frames: Sequence[Any], copy: bool = False) -> None:
        """Send, waiting for room when the high-water mark is reached."""
        while not self.send_nowait(frames, copy=copy):
            fut = self.loop.create_future()
            self._send_waiters.append(fut)
            self._schedule_drain()
            await fut

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.loop.remove_reader(self._fd)
        except (RuntimeError, ValueError, OSError):
            pass  # loop already closed
        for fut in self._send_waiters:
            if not fut.done():
                fut.cancel()
        self.sock.close(linger=0)
