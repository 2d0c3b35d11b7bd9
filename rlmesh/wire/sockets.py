"""ZeroMQ sockets for rlmesh: addresses by URL scheme, limits, and an asyncio wrapper.

The asyncio wrapper drives a plain zmq socket from the event loop's reader callback and
drains every ready message per wake-up, which costs less per message than zmq.asyncio.
Its hot path calls pyzmq's backend methods directly and never raises on an empty socket.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Any, Callable, Sequence

import zmq

from .codec import DEFAULT_MAX_MESSAGE_BYTES
from .logs import log_limited
from .security import secure_client, secure_server

log = logging.getLogger(__name__)

SCHEMES = ("inproc", "ipc", "tcp")

# Plain ints: pyzmq's enum flags cost microseconds per operation on the hot path.
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)
_POLLOUT = int(zmq.POLLOUT)
_NOBLOCK = int(zmq.NOBLOCK)
_SNDMORE = int(zmq.SNDMORE)
# The backend's methods: pyzmq's Socket subclass adds a Python layer to every call.
_get = zmq.backend.Socket.get
_recv = zmq.backend.Socket.recv
_send = zmq.backend.Socket.send
# Below this size a frame is copied into the message: cheaper than tracking a zero-copy
# buffer (pyzmq does the same below its own threshold).
ZERO_COPY_MIN = 64 * 1024


# zmq caps a context at 1,023 sockets unless told otherwise before its first one: that would
# cap a param server or weight relay at about a thousand subscribers (one DEALER each). The
# process's descriptor limit is the real bound (raise_fd_limit), so the context's cap is set
# above it here, when rlmesh's socket layer is first imported (a context already started by
# the caller keeps its own: the option only takes effect before the first socket).
MAX_SOCKETS = 16384


def _context_for_many_peers() -> None:
    try:
        zmq.Context.instance().set(zmq.MAX_SOCKETS, MAX_SOCKETS)
    except zmq.ZMQError:  # pragma: no cover - a libzmq without the option
        pass


_context_for_many_peers()


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
    """Bind and return the address peers should connect to (tcp port 0 resolved). On tcp,
    a process with the cluster's keys binds as a CURVE server (``security``)."""
    scheme_of(address)
    secure_server(sock, address)
    if address.startswith("tcp://") and address.endswith(":0"):
        address = address[:-2] + ":*"
    sock.bind(address)
    return sock.getsockopt_string(zmq.LAST_ENDPOINT) if address.startswith("tcp://") else address


def connect(sock: zmq.Socket, address: str) -> zmq.Socket:
    """Connect; on tcp, as a CURVE client when the process has the cluster's keys."""
    secure_client(sock, address)
    sock.connect(address)
    return sock


class SpinWait:
    """Poll a socket for up to ``budget`` seconds before its owner goes to sleep.

    A thread woken from sleep pays the scheduler's wake-up (tens of µs, more on a VM), and
    its first instructions after it run on cold caches; polling for a message expected
    soon keeps the CPU awake. That pays only while messages come within the budget: after
    ``GIVE_UP`` spins in a row ran out, ``wait`` returns at once, and every ``PROBE``-th
    call spins again to notice traffic that became fast (one message in time turns
    spinning back on). ``budget`` 0 never spins.
    """

    GIVE_UP = 4
    PROBE = 64

    def __init__(self, budget: float) -> None:
        if not budget >= 0:
            raise ValueError(f"a spin budget must be >= 0 seconds, got {budget!r}")
        self.budget = budget
        self.misses = 0  # spins in a row that ran out
        self.spins = self.hits = 0
        self._skipped = 0

    def wait(self, sock: zmq.Socket) -> bool:
        """True once ``sock`` has a message; False when the spin ran out or was skipped."""
        if self.budget <= 0:
            return False
        if self.misses >= self.GIVE_UP and self._skipped < self.PROBE:
            self._skipped += 1
            return False
        self._skipped = 0
        self.spins += 1
        clock = time.perf_counter
        end = clock() + self.budget
        while True:
            if _get(sock, _EVENTS) & _POLLIN:
                self.misses = 0
                self.hits += 1
                return True
            if clock() >= end:
                self.misses += 1
                return False


def fd_limit() -> int | None:
    """This process's soft limit on open file descriptors (None where there is none)."""
    try:
        import resource
    except ImportError:  # not on POSIX
        return None
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def raise_fd_limit(wanted: int) -> None:
    """Raise the soft file-descriptor limit towards ``wanted`` (as far as the hard limit
    lets an unprivileged process): a server's connections each hold one."""
    try:
        import resource
    except ImportError:
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            pass  # a container may forbid it: limit() then lowers the cap instead


def _nbytes(frame: Any) -> int:
    return frame.nbytes if isinstance(frame, memoryview) else len(frame)


class AsyncSocket:
    """A zmq socket driven by the running event loop.

    Received messages are passed to ``on_message(frames)`` synchronously, in order, as
    lists of ``zmq.Frame``. ``send`` waits for room when the high-water mark is reached.
    ``spin_wait`` (seconds): once the socket runs dry, poll it that long for the next
    message before returning to the loop (``SpinWait``; for latency-bound servers). With
    ``spin_when_armed``, only a socket whose owner set ``spin_armed`` since the last spin
    polls (an actor arms it when it answers a call, not for streamed items).
    """

    def __init__(self, sock: zmq.Socket, on_message: Callable[[list[Any]], None] | None,
                 loop: asyncio.AbstractEventLoop | None = None, zero_copy: bool = True,
                 spin_wait: float = 0.0, spin_when_armed: bool = False) -> None:
        self.sock = sock
        self.spin = SpinWait(spin_wait)
        self.spin_when_armed = spin_when_armed
        self.spin_armed = False
        # Over inproc a zero-copy frame is the sender's own memory, handed to the receiver:
        # such sockets pass zero_copy=False so every transport gives the receiver its own.
        self.zero_copy_min = ZERO_COPY_MIN if zero_copy else 1 << 62
        self.errors = 0
        self.on_message = on_message
        self.loop = loop or asyncio.get_running_loop()
        self._fd = sock.getsockopt(zmq.FD)
        self._send_waiters: deque[asyncio.Future[None]] = deque()
        self._drain_scheduled = False
        self._draining = False
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
        if self._send_waiters and _get(sock, _EVENTS) & _POLLOUT:
            self._wake_senders()
        # Ask EVENTS before each receive rather than receiving until EAGAIN: both make
        # libzmq read its command mailbox (which re-arms the edge-triggered FD), but a
        # failed receive also builds a Python exception, and that cost more.
        self._draining = True
        try:
            # At most 256 messages a turn, those caught by spinning included: then the
            # loop's other callbacks and sockets get theirs.
            for _ in range(256):
                if not _get(sock, _EVENTS) & _POLLIN and not self._spin(sock):
                    return
                frame = _recv(sock, _NOBLOCK, False)
                frames = [frame]
                while frame.more:  # the rest of a multipart message is already here
                    frame = _recv(sock, _NOBLOCK, False)
                    frames.append(frame)
                if self.on_message is not None:
                    try:
                        self.on_message(frames)  # may send replies: see send_nowait
                    except Exception:  # a bug in a handler must not stall the socket
                        self.errors += 1
                        log_limited(log, "handler", "message handler failed; message dropped",
                                    exc_info=True)
                if self._closed:
                    return
            self._schedule_drain()
        finally:
            self._draining = False

    def _spin(self, sock: zmq.Socket) -> bool:
        if self.spin_when_armed:
            if not self.spin_armed:
                return False
            self.spin_armed = False
        return self.spin.wait(sock)

    def _wake_senders(self) -> None:
        # Wake them all: each retries, and those that still find no room queue again.
        waiters, self._send_waiters = self._send_waiters, deque()
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def send_nowait(self, frames: Sequence[Any]) -> bool:
        """Send if the socket has room right now; return False if it would block.

        Small frames are copied, large ones (arrays) are sent without copying.
        """
        sock = self.sock
        last = len(frames) - 1
        try:
            # Only the first part can fail with EAGAIN: zmq queues a message atomically.
            for i, frame in enumerate(frames):
                flags = _NOBLOCK if i == last else _NOBLOCK | _SNDMORE
                _send(sock, frame, flags, _nbytes(frame) < self.zero_copy_min)
        except zmq.Again:
            return False
        finally:
            # The send may have consumed the FD's edge for a message that arrived
            # meanwhile; look now, unless the drain loop we are called from looks next.
            if not self._draining and _get(sock, _EVENTS) & _POLLIN:
                self._schedule_drain()
        return True

    async def send(self, frames: Sequence[Any]) -> None:
        """Send, waiting for room when the high-water mark is reached."""
        while not self.send_nowait(frames):
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
