"""Objects with no import path (a lambda, a class or function defined inside a function, one
from an interactive session) handed to this machine's child processes through the pipe
each is started with: never through a socket, never to another machine (docs/security.md).

Plain data names such an object by a token, ``"<local 3 <lambda> at /home/me/train.py line
12>"``; the parent keeps the objects, writes them (cloudpickle) into the stdin pipe of every
child it starts (process.py), and the child loads them from there before its actor is
built (bootstrap.py). This file holds the one ``loads`` of the package.
"""

from __future__ import annotations

import re
import sys
from typing import Any, Iterator

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
    """The object ``token`` names: this process's own, or one its parent handed it."""
    try:
        return _objects[token]
    except KeyError:
        raise NotHanded(
            f"{what} {token} was a lambda or local definition of the process that started the "
            "run, and this process was not given it: register or pass it again in this "
            "process (as RLlib's register_env before a restore), or define it at module "
            "level") from None


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
    import cloudpickle

    for token, obj in cloudpickle.loads(data).items():
        _objects.setdefault(token, obj)
        _tokens.setdefault(id(_objects[token]), token)
