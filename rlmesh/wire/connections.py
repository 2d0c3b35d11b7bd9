"""How many connections a bound socket keeps, and which go when there are too many: the
accounting (from the socket's monitor events, none lost) and the choice of whom to shed,
per client identity (its CURVE user id) so no client can push out the others."""

from __future__ import annotations

import logging
import socket
import time
from collections import Counter
from typing import Any

import zmq

from .logs import log_limited
from .sockets import AsyncSocket, fd_limit, raise_fd_limit

log = logging.getLogger(__name__)

# A valid message read before its connection's ACCEPTED event (libzmq accepts before the
# monitor's events are read) proves that connection when the event comes this soon after.
EARLY_S = 1.0


class ConnectionGuard:
    """At most ``cap`` connections to a bound socket, and never more than this process's
    file descriptors allow (``fd_reserve`` kept for everything else): at the soft limit
    libzmq cannot accept (its listener spins), and a new client got no answer at all.

    A new connection is on probation until it delivers a valid message (``seen``); up to
    ``slack`` connections may be on probation at once, past that the one accepted longest
    ago goes (first in, first out: each has the time of ``slack`` accepts to speak, and
    none holds a place by merely staying connected). Proven connections fill ``cap``; when
    one more proves itself, the least recently valid connection of the client holding the
    most goes (never itself): a new client takes a slot from idle ones, and a client
    holding many cannot push out one holding few. ``per_client`` caps each client's proven
    connections (its own least recently valid goes). A client is its CURVE user id (its
    key file's name), "" for plain connections. Shed idle clients that reconnect come back
    on probation: they never push out one that talks.

    Connections are known by their file descriptor, from the socket's monitor events,
    and cut with ``shutdown(2)`` on that descriptor itself: a ``dup`` of it failed near the
    limit (EMFILE), the connection was forgotten but left open, ~100 such filled the
    process's table, and libzmq's listener spun at EMFILE with every new client unanswered.
    As a net under the accounting's lag (libzmq accepts before the events are read), an
    accepted descriptor number near the soft limit (the kernel gives the lowest free one,
    so all below it are in use) sheds probation connections down to half the slack.

    A connection must finish its handshake (CURVE included) within ``handshake_s``.
    """

    EVENTS = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_CLOSED

    def __init__(self, sock: zmq.Socket, cap: int, handshake_s: float = 10.0,
                 fd_reserve: int = 128, slack: int = 32, per_client: int | None = None) -> None:
        if cap < 1:
            raise ValueError(f"a connection cap must be at least 1, got {cap!r}")
        self.cap, self.sock, self.fd_reserve = cap, sock, fd_reserve
        self.per_client = per_client
        self.slack = max(1, min(slack, fd_reserve // 4))  # so slack never reaches the fd limit
        self.probation: dict[int, float] = {}  # fd -> accepted at, oldest first
        self.active: dict[int, str] = {}  # proven fd -> its client, the least recently valid first
        self.clients: Counter[str] = Counter()  # proven connections per client
        self.shed = 0
        # fd -> (when, client): valid messages read before the connection's ACCEPTED event
        self._early: dict[int, tuple[float, str]] = {}
        raise_fd_limit(cap + fd_reserve)
        sock.setsockopt(zmq.HANDSHAKE_IVL, int(handshake_s * 1000))
        self._monitor = AsyncSocket(sock.get_monitor_socket(self.EVENTS), self._on_event,
                                    zero_copy=False)

    @property
    def open(self) -> int:
        return len(self.probation) + len(self.active)

    def limit(self) -> int:
        """The cap on proven connections, lowered to what the soft file-descriptor limit
        leaves with the slack."""
        soft = fd_limit()
        return self.cap if soft is None else max(1, min(self.cap, soft - self.fd_reserve - self.slack))

    def seen(self, frame: Any) -> None:
        """The connection ``frame`` came in on delivered a valid message."""
        try:
            fd = frame.get(zmq.SRCFD)
        except (AttributeError, zmq.ZMQError):
            return  # not a zmq.Frame (inproc copies), or no descriptor
        client = self.active.pop(fd, None)
        if client is not None:
            self.active[fd] = client  # to the end: the most recently valid
            return
        if self.probation.pop(fd, None) is None:  # its ACCEPTED event is on its way
            self._early[fd] = (time.monotonic(), _user_id(frame))
            return
        self._prove(fd, _user_id(frame))

    def _prove(self, fd: int, client: str) -> None:
        self.active[fd] = client
        self.clients[client] += 1
        if self.per_client is not None and self.clients[client] > self.per_client:
            self._shed(self._oldest_of(client, keep=fd), f"client {client!r} past its "
                                                          f"{self.per_client} connections")
        while len(self.active) > self.limit():
            self._shed(self._oldest_of(self.clients.most_common(1)[0][0], keep=fd),
                       f"{len(self.active)} proven connections, cap {self.limit()}")

    def _oldest_of(self, client: str, keep: int) -> int:
        """``client``'s least recently valid connection other than ``keep`` (else anyone's)."""
        fds = [fd for fd, c in self.active.items() if fd != keep]
        return next((fd for fd in fds if self.active[fd] == client), fds[0])

    def _on_event(self, frames: list[Any]) -> None:
        from zmq.utils.monitor import parse_monitor_message

        event = parse_monitor_message([bytes(getattr(f, "buffer", f)) for f in frames])
        fd = event["value"]
        self._forget(fd)  # a reused descriptor is a new connection
        if event["event"] != zmq.EVENT_ACCEPTED:
            return
        now = time.monotonic()
        early = self._early.pop(fd, None)
        if early is not None and early[0] > now - EARLY_S:  # it spoke before this event came
            self._prove(fd, early[1])
            return
        self.probation[fd] = now
        soft = fd_limit()
        if soft is not None and fd >= soft - self.fd_reserve // 2:  # the kernel's count
            keep = self.slack // 2
            reason = f"descriptor {fd} near the limit {soft}"
        else:
            keep, reason = self.slack, f"{len(self.probation)} connections on probation"
        while len(self.probation) > keep:
            self._shed(next(iter(self.probation)), reason)

    def _forget(self, fd: int) -> None:
        self.probation.pop(fd, None)
        client = self.active.pop(fd, None)
        if client is not None:
            self.clients[client] -= 1
            if not self.clients[client]:
                del self.clients[client]

    def _shed(self, fd: int, reason: str) -> None:
        self._forget(fd)
        self.shed += 1
        # The descriptor itself, never a dup (see the class's doc); libzmq closes it.
        try:
            conn = socket.socket(fileno=fd)
        except OSError:
            pass  # already closed by libzmq
        else:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already gone
            finally:
                conn.detach()  # libzmq owns and closes it
        log_limited(log, "socket", "closed a connection: %s", reason)

    def counts(self) -> dict[str, Any]:
        """Connections open, on probation, shed so far, and proven ones per client."""
        return {"open": self.open, "probation": len(self.probation), "shed": self.shed,
                "by_client": dict(self.clients)}

    def close(self) -> None:
        try:
            self.sock.disable_monitor()
        except zmq.ZMQError:
            pass
        self._monitor.close()


def _user_id(frame: Any) -> str:
    """The CURVE user id the connection was admitted under (its key's name), else ''."""
    try:
        return frame.get("User-Id") or ""
    except zmq.ZMQError:
        return ""
