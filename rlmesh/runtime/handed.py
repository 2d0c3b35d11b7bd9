"""Objects with no import path (a lambda, a class or function defined inside a function, one
from an interactive session) handed to this machine's child processes through the pipe
each is started with: never through a socket, never to another machine (docs/security.md).

Plain data names such an object by a token, ``"<local 3 <lambda> at /home/me/train.py line
12>"``; the parent keeps the objects, writes them (cloudpickle) into the stdin pipe of every
child it starts (process.py), and the child loads them from there before its actor is
built (bootstrap.py). The pipe stays open: an object made later (a lambda given to
``foreach_worker``) follows in a frame of its own (``hand_new``), which a thread of the
child loads (``listen``). This file holds the package's only ``loads`` calls, and they read
that pipe alone.
"""

from __future__ import annotations

import io
import re
import sys
import threading
from typing import Any, BinaryIO, Iterator

_TOKEN = re.compile(r"^<local (\d+) .*>$", re.S)
_objects: dict[str, Any] = {}  # token -> object: kept alive, so one object keeps one token
_tokens: dict[int, str] = {}  # id(object) -> token
_given: bytes = b""  # what this process was handed by its parent, until loaded


class NotHanded(LookupError):
    """A token whose object this process was never given (a new process restoring a
    checkpoint, a process started elsewhere)."""


def needs_handing(obj: Any) -> bool:
    """Whether ``obj`` has no import path another process could use."""
    qualname = getattr(obj, "__qualname__", "") or ""
    module = getattr(obj, "__module__", None)
    if "<" in qualname:  # <lambda>, <locals>
        return True
    main = sys.modules.get(module) if module in ("__main__", "__mp_main__") else None
    return main is not None and not getattr(main, "__file__", None)  # an interactive session


def token_for(obj: Any) -> str:
    """The token that names ``obj`` in plain data (the same one each time)."""
    token = _tokens.get(id(obj))
    if token is None:
        code = getattr(obj, "__code__", None) or getattr(
            getattr(obj, "__init__", None), "__code__", None)
        where = (f" at {code.co_filename} line {code.co_firstlineno}"
                 if code is not None and "<" not in code.co_filename else "")
        name = getattr(obj, "__qualname__", type(obj).__name__)
        n = len(_objects) + 1
        while (token := f"<local {n} {name}{where}>") in _objects:
            n += 1
        _objects[token] = obj
        _tokens[id(obj)] = token
    return token


def is_token(value: Any) -> bool:
    return isinstance(value, str) and _TOKEN.match(value) is not None


def resolve(token: str, what: str = "object") -> Any:
    """The object ``token`` names: this process's own, or one its parent handed it (at
    start, or later on the open channel: waited for up to LATE_WAIT_S)."""
    try:
        return _objects[token]
    except KeyError:
        pass
    with _arrived:
        _arrived.wait_for(lambda: token in _objects or token in _failed or not _listening,
                          LATE_WAIT_S)
        if token in _objects:
            return _objects[token]
        if token in _failed:
            raise NotHanded(f"{what} {token} was handed to this process but cannot be loaded "
                            f"here ({_failed[token]}): define it at module level")
    raise NotHanded(
        f"{what} {token} was a lambda or local definition of the process that started the "
        "run, and this process was not given it: register or pass it again in this "
        "process (as RLlib's register_env before a restore), or define it at module "
        "level")


def tokens_in(data: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """``(where, token)`` for each token in plain data."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield from tokens_in(value, f"{where}.{key}" if where else str(key))
    elif isinstance(data, (list, tuple)):
        for i, value in enumerate(data):
            yield from tokens_in(value, f"{where}[{i}]")
    elif is_token(data):
        yield where, data


def remote_refusal(data: Any) -> str | None:
    """One line refusing a run across machines that names a local object, or None."""
    for where, token in tokens_in(data):
        return (f"{where} is {token}, which a launched cluster cannot import on its nodes "
                "(nothing is pickled across machines): define it at module level and pass "
                "it, or its import path 'pkg.module:name'")
    return None


# --- the spawn channel ---

def payload() -> bytes:
    """What a child started here is handed on its stdin: every object with a token
    (cloudpickle; empty when there is none)."""
    if not _objects:
        return b""
    import cloudpickle

    try:
        return cloudpickle.dumps(dict(_objects))
    except Exception:  # name the one that fails, in one line
        for token, obj in _objects.items():
            try:
                cloudpickle.dumps(obj)
            except Exception as exc:
                raise NotHandable(
                    f"{token} cannot be handed to the run's processes ({type(exc).__name__}: "
                    f"{exc}): define it at module level, or let it hold no such object") from None
        raise


class NotHandable(TypeError):
    """A lambda or local definition that cloudpickle cannot write (it holds a lock, a socket,
    an open file ...)."""


def receive(data: bytes) -> None:
    """Keep what the parent wrote on this process's stdin, for ``load``."""
    global _given
    _given = data


def load() -> None:
    """Unpickle what ``receive`` kept, once, at start-up: bootstrap calls it after the
    actor's sys.path is in place (so by-reference classes import) and before the actor is
    built, so nothing later (a message handler) ever unpickles."""
    global _given
    if not _given:
        return
    data, _given = _given, b""
    for token, obj in _unpickle(data).items():
        _objects.setdefault(token, obj)
        _tokens.setdefault(id(_objects[token]), token)


def _unpickle(data: bytes) -> Any:
    """The one unpickling of the package: bytes the parent wrote on this process's stdin."""
    import cloudpickle

    return cloudpickle.loads(data)


# --- the channel kept open: objects made after a child started ---

LATE_WAIT_S = 30.0  # how long a child waits for a token its parent is still writing
_arrived = threading.Condition()
_listening = False  # a thread of this process reads its parent's later frames
_failed: dict[str, str] = {}  # token -> why the object its parent handed cannot load here
_channels: list[Channel] = []  # parent side: each live child's open stdin
_late: Any = None  # queue of (channel, frame) for the writer thread, made on first use


def frame(data: bytes) -> bytes:
    """``data`` with its length before it: frames follow one another on the pipe."""
    return len(data).to_bytes(8, "big") + data


def read_frame(stream: BinaryIO) -> bytes | None:
    """The next frame of ``stream`` (a pipe's raw file: reads may come short); None at its
    end."""
    head = _read_exactly(stream, 8)
    if head is None:
        return None
    return _read_exactly(stream, int.from_bytes(head, "big"))


def _read_exactly(stream: BinaryIO, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = stream.read(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


class Channel:
    """A child's stdin after its first frame, and the tokens the child has been given.
    ``lock`` orders whole frames: the first may still be in a thread's write."""

    def __init__(self, stdin: BinaryIO, tokens: Any) -> None:
        self.stdin = stdin
        self.sent = set(tokens)
        self.lock = threading.Lock()

    def write(self, data: bytes, locked: bool = False) -> bool:
        """Write ``data`` (a frame, or the first bytes); False once the child is gone.
        ``locked``: the caller acquired ``lock`` for this write already."""
        if not locked:
            self.lock.acquire()
        try:
            self.stdin.write(data)
            self.stdin.flush()
            return True
        except (OSError, ValueError):  # it died, or was closed
            return False
        finally:
            self.lock.release()

    def close(self) -> None:
        with self.lock:
            try:
                self.stdin.close()
            except OSError:
                pass
        if self in _channels:
            _channels.remove(self)


def open_channel(stdin: BinaryIO) -> tuple[Channel, bytes]:
    """A channel on a new child's stdin, registered for ``hand_new``, and its first frame
    (every object with a token now)."""
    tokens = list(_objects)
    channel = Channel(stdin, tokens)
    _channels.append(channel)
    return channel, frame(payload())


def hand_new() -> None:
    """Hand every live child started here the objects given a token since it started,
    in a frame of their own, each pickled apart (one that fails to load there is named
    alone); written by a thread, so the caller never waits on a child. Call it before a
    message names such a token."""
    import cloudpickle

    global _late
    for channel in list(_channels):
        new = [t for t in list(_objects) if t not in channel.sent]
        if not new:
            continue
        parts = {}
        for token in new:
            try:
                parts[token] = cloudpickle.dumps(_objects[token])
            except Exception as exc:
                raise NotHandable(f"{token} cannot be handed to the run's processes "
                                  f"({type(exc).__name__}: {exc}): define it at module level, "
                                  "or let it hold no such object") from None
        channel.sent.update(new)
        if _late is None:
            import queue

            _late = queue.Queue()
            threading.Thread(target=_write_late, name="spawn-channel-late", daemon=True).start()
        # token and pickle, each a frame of its own, inside the frame
        _late.put((channel, frame(b"".join(frame(t.encode()) + frame(blob)
                                          for t, blob in parts.items()))))


def _write_late() -> None:
    while True:
        channel, data = _late.get()
        if not channel.write(data) and channel in _channels:
            _channels.remove(channel)


def listen(stream: BinaryIO) -> None:
    """Load the later frames of ``stream`` (this process's stdin, its raw file: a thread
    blocked in a buffered reader aborts the interpreter's exit) on a thread, as they come;
    bootstrap calls it once ``load`` has run."""
    global _listening
    _listening = True
    threading.Thread(target=_listen, args=(stream,), name="spawn-channel", daemon=True).start()


def _listen(stream: BinaryIO) -> None:
    global _listening
    try:
        while (data := read_frame(stream)) is not None:
            parts = io.BytesIO(data)
            while (token_bytes := read_frame(parts)) is not None:
                token, blob = token_bytes.decode(), read_frame(parts) or b""
                try:
                    obj = _unpickle(blob)
                except Exception as exc:  # noqa: BLE001 (named when the token is asked for)
                    with _arrived:
                        _failed[token] = f"{type(exc).__name__}: {exc}"
                        _arrived.notify_all()
                    continue
                with _arrived:
                    _objects.setdefault(token, obj)
                    _tokens.setdefault(id(_objects[token]), token)
                    _arrived.notify_all()
    finally:
        with _arrived:
            _listening = False
            _arrived.notify_all()
