"""Every message type that crosses an rlmesh socket, its fields, and their validation.

A message is a dict ``{"v": PROTOCOL_VERSION, "t": <type>, ...fields}`` encoded by the
codec; arrays inside the fields travel as raw frames.
"""

from __future__ import annotations

from typing import Any

# Version 2: every actor serves only the calls its class declares (rlmesh.runtime.protocol),
# so the role tables (docs/architecture.md, "Protocol") are part of this version: a change to
# one bumps it. HELLO_OK names the calls the actor serves.
# Version 4 (issue 36): plain-data arguments typed (Data), learners told the code they may
# import for add_policy.
# Version 6 (issue 49): roles are started with a typed spec (roles/specs.py) instead of
# config dicts carrying underscore keys.
# Version 10: learners serve updates_reported (what the next pop_metrics reports), which an
# asynchronous iteration waits on.
PROTOCOL_VERSION = 10

# --- data plane: handle <-> actor (DEALER -> ROUTER) ---
HELLO = "hello"  # handle -> actor at connect; reply HELLO_OK (or ERROR on version mismatch)
HELLO_OK = "hello_ok"  # actor -> handle: {"id", "actor": name, "cls": class path, "calls": [names]}
CALL = "call"  # {"id", "m": method, "a": args, "k": kwargs}; reply REPLY or ERROR
TELL = "tell"  # {"m", "a", "k"}; no reply, a failure is counted and logged
REPLY = "reply"  # {"id", "r": result}
ERROR = "error"  # {"id": call id or None, "etype", "msg", "tb"}; etype UnknownCall, BadRequest, ...
STREAM = "stream"  # {"ch": channel, "seq", "m": method, "p": item}; handled in order
CREDIT = "credit"  # actor -> handle: {"ch", "n": items the sender may now send}

# --- control plane: anyone -> a process's control thread (DEALER -> ROUTER) ---
PING = "ping"  # {"id"}; reply PONG {"id", "status": {...}}
PONG = "pong"
STACK = "stack"  # {"id"}; reply STACK_REPLY {"id", "report": {...}}
STACK_REPLY = "stack_reply"
STOP = "stop"  # {"id"}; graceful stop; reply STOP_OK
STOP_OK = "stop_ok"

_FIELDS: dict[str, dict[str, type | tuple[type, ...]]] = {
    HELLO: {"id": int},
    HELLO_OK: {"id": int, "actor": str, "cls": str, "calls": list},
    CALL: {"id": int, "m": str, "a": list, "k": dict},
    TELL: {"m": str, "a": list, "k": dict},
    REPLY: {"id": int},
    ERROR: {"etype": str, "msg": str},
    STREAM: {"ch": int, "seq": int, "m": str},
    CREDIT: {"ch": int, "n": int},
    PING: {"id": int},
    PONG: {"id": int, "status": dict},
    STACK: {"id": int},
    STACK_REPLY: {"id": int, "report": dict},
    STOP: {"id": int},
    STOP_OK: {"id": int},
}
MESSAGE_TYPES = frozenset(_FIELDS)


class ProtocolError(ValueError):
    """A message that decoded but is not a valid rlmesh message."""


class VersionMismatch(ProtocolError):
    """The peer speaks another protocol version."""

    def __init__(self, theirs: Any, ours: int = PROTOCOL_VERSION, text: str = "") -> None:
        super().__init__(text or (
            f"protocol version mismatch: the peer speaks rlmesh wire protocol {theirs!r}, "
            f"this process speaks {ours}; install the same rlmesh version on both sides"
        ))
        self.theirs = theirs
        self.ours = ours


def make(kind: str, **fields: Any) -> dict[str, Any]:
    """Build a message of a named type."""
    assert kind in _FIELDS, kind
    fields["v"] = PROTOCOL_VERSION
    fields["t"] = kind
    return fields


def validate(msg: Any) -> dict[str, Any]:
    """Return ``msg`` if it is a well-formed message of a known type, else raise."""
    if not isinstance(msg, dict):
        raise ProtocolError(f"message is a {type(msg).__name__}, expected a map")
    version = msg.get("v")
    if type(version) is not int or version != PROTOCOL_VERSION:  # True == 1 == 1.0
        raise VersionMismatch(version)
    kind = msg.get("t")
    fields = _FIELDS.get(kind) if isinstance(kind, str) else None
    if fields is None:
        raise ProtocolError(f"unknown message type {kind!r}")
    for name, typ in fields.items():
        value = msg.get(name)
        if not isinstance(value, typ) or isinstance(value, bool) and typ is int:
            raise ProtocolError(
                f"{kind} message: field {name!r} must be {_type_name(typ)}, got {value!r:.80}"
            )
    return msg


def peek_call_id(header: Any) -> int | None:
    """The call id in a header whose message failed to decode, so that the error reply
    reaches the waiting call at once; None when even that cannot be read."""
    import msgpack

    try:
        return call_id_of(msgpack.unpackb(header, raw=False, strict_map_key=False,
                                          ext_hook=lambda code, data: None,
                                          max_str_len=1 << 16, max_bin_len=1 << 20,
                                          max_array_len=1 << 16, max_map_len=1 << 10,
                                          max_ext_len=1 << 20))
    except Exception:  # anything at all: this is best effort on hostile bytes
        return None


def call_id_of(msg: Any) -> int | None:
    """Best-effort call id of a (possibly invalid) message, to address an error reply."""
    if isinstance(msg, dict):
        cid = msg.get("id")
        if isinstance(cid, int) and not isinstance(cid, bool):
            return cid
    return None


def _type_name(typ: type | tuple[type, ...]) -> str:
    if isinstance(typ, tuple):
        return " or ".join(t.__name__ for t in typ)
    return typ.__name__
