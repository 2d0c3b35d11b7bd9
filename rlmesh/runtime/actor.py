"""The Actor base class and the server shell that serves its declared calls on a ROUTER socket.

What to do with a message is decided by plain methods (``decide``, over the actor's
``protocol.Table``); the socket I/O around them is thin. A bad message gets an error reply
or a counted drop.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import time
import traceback
from collections import Counter, deque
from typing import Any, Callable, ClassVar

import zmq

from ..wire import codec, messages as M
from ..wire.logs import log_limited
from ..wire.connections import ConnectionGuard
from ..wire.sockets import AsyncSocket, bind, configure
from .protocol import CallError, Entry, Protocol, Table

# By its full name: "from . import protocol" names the package too, whose __init__ imports
# this module (an import cycle to a reader, and to tools that read imports).
import rlmesh.runtime.protocol as P

log = logging.getLogger(__name__)

MAX_ERROR_CHARS = 500  # an error reply's line to an untrusted caller (ActorServer.tracebacks)
MAX_STREAM_BACKLOG = 1024  # items one channel may have waiting, whatever window a sender asks
CREDIT_BATCH = 4  # a busy channel returns credit for this many small items in one message


class Actor:
    """Base class of every rlmesh actor.

    ``protocol`` declares the methods served remotely (``rlmesh.runtime.protocol.Protocol``:
    calls, tells, streams, test hooks); a class that declares none serves its public
    methods (no leading underscore), as a user's actor does. Async methods run as tasks on
    the actor's event loop, plain ones run inline. ``on_start`` and
    ``on_stop`` are awaited around the actor's life. ``self.job`` reaches the job: named
    actors (``await self.job.get_actor("counter")``) and spawning children.

    ``spin_wait_us`` (a class attribute, 300 by default): an actor in a process of its own,
    once it has answered a call, polls its socket that long for the next request before
    its event loop sleeps. A request that comes in that time is served without a wake-up
    (a round trip then costs 1.2-1.5x a blocking REQ/REP pair instead of 1.8x). Streamed
    items and tells never start a poll; the poll holds a core and the GIL, and stops by
    itself while calls come slower than that (``SpinWait``). 0 turns it off, e.g. for an
    actor whose own threads need the GIL between calls. In-process actors never poll.
    """

    job: Any  # the Job that runs it (job.py, which imports this module: typed loosely)
    name: str
    spin_wait_us: float = 300
    protocol: ClassVar[Protocol | None] = None

    async def on_start(self) -> None:
        """Called once the actor is bound, before the first message is served."""

    async def on_stop(self) -> None:
        """Called on a graceful stop."""


def spin_wait_of(actor: Actor) -> float:
    """The actor's ``spin_wait_us`` in seconds; a clear error if it is not a number >= 0."""
    value = getattr(actor, "spin_wait_us", 0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"{type(actor).__qualname__}.spin_wait_us must be a number of "
                         f"microseconds >= 0, got {value!r}")
    return value / 1e6


def public_methods(cls: type) -> dict[str, Callable[..., Any]]:
    """Public methods of ``cls``, its Actor bases and its mixins (plain, static and class
    methods), not those of ``Actor``: what a class without a ``protocol`` serves."""
    return P.public_methods(cls, Actor)


_tables: dict[tuple[type, bool], Table] = {}


def table_of(cls: type, hooks: bool | None = None) -> Table:
    """The served table of an actor class: its declared ``protocol`` (inherited as it is by
    a subclass that declares none), else its public methods; test hooks where they are on."""
    hooks = P.test_hooks_on() if hooks is None else hooks
    key = (cls, hooks)
    if key not in _tables:
        declared = getattr(cls, "protocol", None)
        _tables[key] = Table(cls, declared or P.of_public_methods(cls, Actor), hooks)
    return _tables[key]


def _buffer(frame: Any) -> Any:
    return getattr(frame, "buffer", frame)


# (routing id, header frame) of the message being handled, for ``caller_id``. A plain
# global, not a ContextVar: setting one cost ~1 us a message on the 2-core VM.
_caller: tuple[Any, Any] | None = None


def caller_id() -> str:
    """Who sent the call a plain (non-async) method is serving: the CURVE user id its key
    was admitted under (the ZAP handler's name for it), else its connection's routing id in
    hex; "" outside such a call (async methods run after the message was handled)."""
    caller = _caller
    if caller is None:
        return ""
    identity, header = caller
    try:
        user = header.get("User-Id") if isinstance(header, zmq.Frame) else None
    except zmq.ZMQError:  # no such property: a plain connection
        user = None
    return user or bytes(_buffer(identity)).hex()


class ActorServer:
    """Serves one actor's declared calls on a ROUTER socket."""

    def __init__(self, actor: Actor, name: str, *, limits: codec.Limits = codec.Limits(),
                 ctx: zmq.Context | None = None, max_connections: int | None = None,
                 max_connections_per_client: int | None = None, tracebacks: bool = True) -> None:
        self.actor = actor
        # False for untrusted callers (the policy server's clients): an error reply is one
        # line, the traceback goes to this process's log only.
        self.tracebacks = tracebacks
        self.max_connections = max_connections
        self.max_connections_per_client = max_connections_per_client
        self.guard: ConnectionGuard | None = None
        self.name = name
        self.limits = limits
        self.ctx = ctx or zmq.Context.instance()
        self.table = table_of(type(actor))
        self.cls_path = self.table.cls_path
        self.address = ""
        self.stats: Counter[str] = Counter()
        self.in_flight: dict[int, tuple[str, float]] = {}  # call key -> (method, start)
        self._keys = itertools.count()
        self._streams: dict[tuple[bytes, int], deque[dict[str, Any]]] = {}
        self._stream_tasks: dict[tuple[bytes, int], asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._sock: AsyncSocket | None = None
        self.stopped = asyncio.Event()

    # --- decisions (no sockets) ---

    @property
    def methods(self) -> dict[str, Callable[..., Any]]:
        """The served calls' methods, by name (test hooks only where they are on)."""
        return {name: entry.fn for name, entry in self.table.entries.items()}

    def resolve(self, method: str, kind: str = P.CALL) -> Callable[..., Any]:
        """The bound method a request of ``kind`` names, or CallError."""
        return getattr(self.actor, self.table.resolve(kind, method).name)

    def decide(self, kind: str, method: str, args: list[Any], kwargs: dict[str, Any]) -> Entry:
        """The declared entry a request of ``kind`` (call, tell, stream) names, once its
        arguments' types fit; else CallError: ``UnknownCall`` for a call this actor does not
        serve (undeclared, private, a test hook with test hooks off), ``BadRequest`` for a
        wrong kind or an argument of the wrong type. Arity is checked when the call fails
        (``_start``), so a good call pays nothing for it."""
        entry = self.table.resolve(kind, method)
        why = entry.bad_types(args, kwargs)
        if why is not None:
            raise CallError("BadRequest", why)
        return entry

    def bad_arguments(self, method: str, args: list[Any], kwargs: dict[str, Any],
                      kind: str = P.CALL) -> CallError | None:
        """Why ``method(*args, **kwargs)`` cannot be served, or None if it can."""
        try:
            entry = self.decide(kind, method, args, kwargs)
        except CallError as exc:
            return exc
        why = entry.bad_arity(args, kwargs)
        return None if why is None else CallError("BadRequest", why)

    # --- socket shell ---

    async def start(self, address: str,
                    configure_socket: Callable[[zmq.Socket], None] | None = None,
                    spin_wait: float = 0.0, spin_after_calls_only: bool = True) -> str:
        """Bind and serve; ``configure_socket`` sets options that must precede the bind
        (CURVE server keys); ``spin_wait``: seconds to poll for the next request before
        the loop sleeps (``AsyncSocket``), by default only after answering a call."""
        sock = configure(self.ctx.socket(zmq.ROUTER), self.limits.max_message_bytes)
        if configure_socket is not None:
            configure_socket(sock)
        if self.max_connections is not None:
            self.guard = ConnectionGuard(sock, self.max_connections,
                                         per_client=self.max_connections_per_client)
        self.address = bind(sock, address)
        self._sock = AsyncSocket(sock, self._on_message,
                                 zero_copy=not self.address.startswith("inproc://"),
                                 spin_wait=spin_wait, spin_when_armed=spin_after_calls_only)
        return self.address

    def spin_counts(self) -> dict[str, int]:
        """How often the socket polled for a next request (``spin_wait``), and how often
        one came in time."""
        if self._sock is None:
            return {}
        return {"spins": self._sock.spin.spins, "spin_hits": self._sock.spin.hits}

    def close(self) -> None:
        for task in list(self._tasks) + list(self._stream_tasks.values()):
            task.cancel()
        if self.guard is not None:
            self.guard.close()
        if self._sock is not None:
            self._sock.close()
        self.stopped.set()

    def _reply(self, identity: Any, msg: dict[str, Any]) -> None:
        assert self._sock is not None
        try:
            frames = codec.encode(msg)
        except Exception as exc:  # EncodeError, or a library's own error on odd values
            frames = codec.encode(M.make(M.ERROR, id=msg.get("id"), etype="EncodeError",
                                         msg=f"result cannot be sent: {exc}", tb=""))
        if not self._sock.send_nowait([identity, *frames]):
            self.stats["replies_dropped_hwm"] += 1  # peer not reading; bounded by its HWM
        elif msg.get("id") is not None:  # an answer to a call: its caller may call again soon
            self._sock.spin_armed = True

    def _error(self, identity: Any, call_id: int | None, etype: str, text: str,
               tb: str = "", **extra: Any) -> None:
        if not self.tracebacks:
            if tb:
                log_limited(log, f"{self.name}:tb", "%s: a call failed: %s", self.name, tb)
            text, tb = " ".join(text.split())[:MAX_ERROR_CHARS], ""
        self._reply(identity, M.make(M.ERROR, id=call_id, etype=etype, msg=text, tb=tb, **extra))

    def _on_message(self, frames: list[Any]) -> None:
        self.stats["messages"] += 1
        if len(frames) < 2:
            self.stats["dropped_malformed"] += 1
            log_limited(log, self.name, "%s: dropped a message with no body", self.name)
            return
        global _caller
        identity, body = frames[0], frames[1:]
        _caller = (identity, body[0])
        try:
            self._serve(identity, body)
        finally:
            _caller = None

    def _serve(self, identity: Any, body: list[Any]) -> None:
        raw: Any = None
        try:
            raw = codec.decode(body, self.limits)
            msg = M.validate(raw)
        except (codec.DecodeError, M.ProtocolError) as exc:
            self.stats["rejected"] += 1
            log_limited(log, self.name, "%s: rejected a message: %.200s", self.name, exc)
            etype = "VersionMismatch" if isinstance(exc, M.VersionMismatch) else "ProtocolError"
            call_id = M.call_id_of(raw) if raw is not None else M.peek_call_id(_buffer(body[0]))
            self._error(identity, call_id, etype, str(exc))
            return
        if self.guard is not None:
            self.guard.seen(body[0])
        kind = msg["t"]
        if kind == M.CALL:
            try:
                entry = self.decide(P.CALL, msg["m"], msg["a"], msg["k"])
            except CallError as exc:
                self.stats["errors"] += 1
                self._error(identity, msg["id"], exc.etype, str(exc))
                return
            if entry.is_async:
                self._spawn(self._run_call(identity, msg, entry))
            else:
                self._call_inline(identity, msg, entry)
        elif kind == M.TELL:
            try:
                entry = self.decide(P.TELL, msg["m"], msg["a"], msg["k"])
            except CallError as exc:
                self._tell_failed(msg, exc)
                return
            if entry.is_async:
                self._spawn(self._run_tell(msg, entry))
            else:
                self._tell_inline(msg, entry)
        elif kind == M.STREAM:
            if len(body) > 1:  # it carries raw frames (arrays of 64 KiB and more)
                msg["_large"] = True
            self._on_stream(identity, msg)
        elif kind == M.HELLO:
            self._reply(identity, M.make(M.HELLO_OK, id=msg["id"], actor=self.name,
                                         cls=self.cls_path, calls=sorted(self.table.entries)))
        else:
            self.stats["rejected"] += 1
            self._error(identity, M.call_id_of(msg), "ProtocolError",
                        f"an actor does not accept {kind!r} messages")

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _start(self, entry: Entry, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """Call the method: its result, or a coroutine for an async method.

        Arity is checked only when the call raises TypeError, so the common path pays
        nothing for the check.
        """
        fn = getattr(self.actor, entry.name)
        try:
            return fn(*args, **kwargs)
        except TypeError:
            why = entry.bad_arity(args, kwargs)
            if why is None:
                raise
        # Raised unnamed: ``raise bad`` left bad -> traceback -> this frame -> bad, a cycle
        # that kept the call's frames (three 600 MB messages: 1.9 GB) until a GC ran.
        raise CallError("BadRequest", why)

    def _run_sync(self, entry: Entry, args: list[Any], kwargs: dict[str, Any]) -> Any:
        key = next(self._keys)
        self.in_flight[key] = (entry.name, time.monotonic())
        try:
            return self._start(entry, args, kwargs)
        finally:
            del self.in_flight[key]

    async def _invoke(self, entry: Entry, args: list[Any], kwargs: dict[str, Any]) -> Any:
        key = next(self._keys)
        self.in_flight[key] = (entry.name, time.monotonic())
        try:
            result = self._start(entry, args, kwargs)
            if inspect.isawaitable(result):
                result = await result
            return result
        finally:
            del self.in_flight[key]

    def in_flight_report(self) -> list[dict[str, Any]]:
        """Calls being served now, with their age (seconds)."""
        now = time.monotonic()
        return [{"method": m, "age_s": round(now - t, 3)} for m, t in list(self.in_flight.values())]

    def _call_inline(self, identity: Any, msg: dict[str, Any], entry: Entry) -> None:
        """A plain (non-async) method runs right here: no task, no extra loop turn."""
        try:
            result = self._run_sync(entry, msg["a"], msg["k"])
        except CallError as exc:
            self.stats["errors"] += 1
            self._error(identity, msg["id"], exc.etype, str(exc))
        except Exception as exc:
            self.stats["errors"] += 1
            self._error(identity, msg["id"], type(exc).__qualname__, str(exc), traceback.format_exc())
        else:
            self.stats["calls"] += 1
            self._reply(identity, M.make(M.REPLY, id=msg["id"], r=result))

    async def _run_call(self, identity: Any, msg: dict[str, Any], entry: Entry) -> None:
        call_id = msg["id"]
        try:
            result = await self._invoke(entry, msg["a"], msg["k"])
        except CallError as exc:
            self.stats["errors"] += 1
            self._error(identity, call_id, exc.etype, str(exc))
        except Exception as exc:  # the user's method raised: send it back, keep serving
            self.stats["errors"] += 1
            self._error(identity, call_id, type(exc).__qualname__, str(exc),
                        traceback.format_exc())
        else:
            self.stats["calls"] += 1
            self._reply(identity, M.make(M.REPLY, id=call_id, r=result))

    async def _run_tell(self, msg: dict[str, Any], entry: Entry) -> None:
        try:
            await self._invoke(entry, msg["a"], msg["k"])
            self.stats["tells"] += 1
        except Exception as exc:
            self._tell_failed(msg, exc)

    def _tell_inline(self, msg: dict[str, Any], entry: Entry) -> None:
        try:
            self._run_sync(entry, msg["a"], msg["k"])
            self.stats["tells"] += 1
        except Exception as exc:
            self._tell_failed(msg, exc)

    def _tell_failed(self, msg: dict[str, Any], exc: Exception) -> None:
        # No one to reply to: count and log.
        self.stats["tell_failures"] += 1
        log_limited(log, self.name, "%s: tell %.80s failed: %.200s", self.name, msg["m"], exc,
                    exc_info=not isinstance(exc, CallError))

    def _on_stream(self, identity: Any, msg: dict[str, Any]) -> None:
        key = (bytes(identity.buffer if hasattr(identity, "buffer") else identity), msg["ch"])
        backlog = self._streams.setdefault(key, deque())
        if len(backlog) >= MAX_STREAM_BACKLOG:
            self.stats["stream_dropped_over_window"] += 1
            self._error(identity, None, "Backpressure",
                        f"stream {msg['ch']} sent past its credit; item {msg['seq']} dropped",
                        ch=msg["ch"])
            return
        backlog.append(msg)
        if key not in self._stream_tasks:
            task = asyncio.ensure_future(self._drain_stream(identity, key, backlog))
            self._stream_tasks[key] = task

    async def _drain_stream(self, identity: Any, key: tuple[bytes, int],
                            backlog: deque[dict[str, Any]]) -> None:
        owed = 0  # credits earned but not yet sent: sent together, fewer messages
        try:
            while backlog:
                msg = backlog.popleft()
                try:
                    item = [msg.get("p")]
                    entry = self.decide(P.STREAM, msg["m"], item, {})
                    if entry.is_async:
                        await self._invoke(entry, item, {})
                    else:
                        self._run_sync(entry, item, {})
                    self.stats["stream_items"] += 1
                except Exception as exc:
                    self.stats["stream_failures"] += 1
                    log_limited(log, self.name, "%s: stream item for %.80s failed: %.200s",
                                self.name, msg["m"], exc)
                    etype = exc.etype if isinstance(exc, CallError) else type(exc).__qualname__
                    self._error(identity, None, etype, str(exc), ch=key[1])
                owed += 1
                # Large items get their credit back at once: batching it held the sender
                # of 8 MB arrays to 3 GB/s where single credits let it reach 4.
                if not backlog or owed >= CREDIT_BATCH or msg.get("_large"):
                    self._reply(identity, M.make(M.CREDIT, ch=key[1], n=owed))
                    owed = 0
                    await asyncio.sleep(0)  # let the socket bring in what the credit freed
        finally:
            # Cancelled by close(): the socket is gone (an actor served in the driver's
            # process, stopped while a stream item waited, lives on to see this).
            if owed and not self.stopped.is_set():
                self._reply(identity, M.make(M.CREDIT, ch=key[1], n=owed))
            del self._stream_tasks[key]
            if not backlog:
                self._streams.pop(key, None)

    def probe(self) -> dict[str, Any]:
        """Counters for diagnostics: queue depths, in-flight calls, message stats."""
        return {
            "tasks": len(self._tasks),
            "stream_backlog": sum(len(b) for b in self._streams.values()),
            "in_flight": self.in_flight_report(),
            "stats": dict(self.stats),
        }
