"""The control plane of one process: a thread with its own zmq context and socket.

It answers heartbeats, stack requests and stop requests while the event loop is busy or
blocked, and watches the lifeline to the parent: when the parent goes, so does this
process and everything it started.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from typing import Any, Callable

import zmq

from ..wire import codec, messages as M
from ..wire.security import release
from ..wire.sockets import bind, configure, connect
from .diagnostics import Diagnostics

log = logging.getLogger(__name__)

# Control requests (heartbeats, stacks, stop) are a few small maps: 1 MiB of empty maps
# would still be a million dicts, so objects are bounded too; no tensor is ever one.
CONTROL_LIMITS = codec.Limits(max_message_bytes=1 << 20, max_header_bytes=1 << 20,
                              max_objects=1 << 16, tensors=False)


class ControlThread(threading.Thread):
    """Serves PING, STACK and STOP on ``address``; kills the process group on lifeline EOF."""

    #: How often the loop looks at the clock for ``ping_timeout``; close() wakes it at once.
    POLL_MS = 200

    def __init__(self, address: str, diagnostics: Diagnostics,
                 on_stop: Callable[[], None], lifeline_fd: int | None = None,
                 ping_timeout: float | None = None) -> None:
        super().__init__(name="rlmesh.control", daemon=True)
        self.diagnostics = diagnostics
        self.on_stop = on_stop
        self.lifeline_fd = lifeline_fd
        self.ctx = zmq.Context(io_threads=1)
        self.sock = configure(self.ctx.socket(zmq.ROUTER), CONTROL_LIMITS.max_message_bytes, hwm=100)
        self.address = bind(self.sock, address)
        self.rejected = 0
        self._closing = threading.Event()
        # close() closes the write end: the poll wakes at once, not at its next timeout
        # (up to POLL_MS in every process's shutdown, measured 200 ms in each env runner's).
        self._wake_r, wake_w = os.pipe()
        self._wake_w: int | None = wake_w
        self._wake_lock = threading.Lock()
        # A process whose parent is on another machine (a node agent): no PING for this
        # long means the parent, or the network to it, is gone.
        self.ping_timeout = ping_timeout
        self.last_ping = time.monotonic()

    def run(self) -> None:
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        if self.lifeline_fd is not None:
            poller.register(self.lifeline_fd, zmq.POLLIN)
        poller.register(self._wake_r, zmq.POLLIN)
        while not self._closing.is_set():
            try:
                ready = dict(poller.poll(self.POLL_MS))
            except zmq.ZMQError:
                break  # context terminated during shutdown
            if self.lifeline_fd is not None and self.lifeline_fd in ready:
                if not os.read(self.lifeline_fd, 1):
                    self._parent_gone()
            if self.sock in ready:
                self._serve_one()
            if self.ping_timeout and time.monotonic() - self.last_ping > self.ping_timeout:
                log.warning("no heartbeat from the parent for %.0f s", self.ping_timeout)
                self._parent_gone()
        self.sock.close(linger=0)
        release(self.ctx)
        self.ctx.term()
        os.close(self._wake_r)

    def _serve_one(self) -> None:
        frames = self.sock.recv_multipart(copy=False)
        if len(frames) < 2:
            self.rejected += 1
            return
        identity = frames[0]
        raw: Any = None
        try:
            raw = codec.decode(frames[1:], CONTROL_LIMITS)
            msg = M.validate(raw)
            reply = self.answer(msg)
        except (codec.DecodeError, M.ProtocolError) as exc:
            self.rejected += 1
            reply = M.make(M.ERROR, id=M.call_id_of(raw), etype=type(exc).__name__, msg=str(exc))
        self.sock.send_multipart([identity, *codec.encode(reply)], copy=False)

    def answer(self, msg: dict[str, Any]) -> dict[str, Any]:
        """The reply to one control message (no sockets involved)."""
        kind = msg["t"]
        if kind == M.PING:
            self.last_ping = time.monotonic()
            return M.make(M.PONG, id=msg["id"], status=self.diagnostics.status())
        if kind == M.STACK:
            return M.make(M.STACK_REPLY, id=msg["id"], report=self.diagnostics.report())
        if kind == M.STOP:
            self.on_stop()
            return M.make(M.STOP_OK, id=msg["id"])
        raise M.ProtocolError(f"the control plane does not accept {kind!r} messages")

    def _parent_gone(self) -> None:
        # The parent died without stopping us: take our own children with us. Our process
        # group holds only us and what we spawned in-group; children in their own
        # sessions have their own lifelines to us and follow.
        log.warning("parent process is gone; exiting")
        try:
            os.killpg(os.getpgid(0), signal.SIGKILL)
        finally:
            os._exit(1)

    def close(self) -> None:
        with self._wake_lock:
            self._closing.set()
            if self._wake_w is not None:  # its end of file wakes the poll
                os.close(self._wake_w)
                self._wake_w = None


def ping_control(control: str, timeout: float) -> tuple[float | None, dict[str, Any] | None]:
    """One PING to a process's control socket: (its round trip in seconds, its status), or
    (None, None) when it did not answer within ``timeout`` (gone, or not serving). Blocking."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        connect(sock, control)
        start = time.monotonic()
        sock.send_multipart(codec.encode(M.make(M.PING, id=1)))
        if not sock.poll(int(timeout * 1000)):
            return None, None
        reply = codec.decode(sock.recv_multipart(copy=False))
        return time.monotonic() - start, reply.get("status")
    except Exception:  # a malformed reply, an address zmq refuses: no answer
        return None, None
    finally:
        sock.close()
