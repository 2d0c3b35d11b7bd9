"""Message validation: every well-formed type passes, anything else is a ProtocolError
whose text says what was wrong; a version mismatch names both versions."""

from __future__ import annotations

import pytest

from rlmesh.wire import codec, messages as M
from rlmesh.wire.messages import PROTOCOL_VERSION, ProtocolError, VersionMismatch

WELL_FORMED = {
    M.HELLO: dict(id=1),
    M.HELLO_OK: dict(id=1, actor="counter", cls="pkg.mod:Counter", calls=["get", "inc"]),
    M.CALL: dict(id=2, m="inc", a=[1, (2, 3)], k={"by": 2}),
    M.TELL: dict(m="inc", a=[], k={}),
    M.REPLY: dict(id=2, r=None),
    M.ERROR: dict(id=None, etype="ValueError", msg="boom", tb=""),
    M.STREAM: dict(ch=1, seq=0, m="consume", p=[1, 2]),
    M.CREDIT: dict(ch=1, n=4),
    M.PING: dict(id=3),
    M.PONG: dict(id=3, status={"loop": {}}),
    M.STACK: dict(id=4),
    M.STACK_REPLY: dict(id=4, report={"threads": []}),
    M.STOP: dict(id=5),
    M.STOP_OK: dict(id=5),
}

# One field of each type that a peer may get wrong, per message type.
REQUIRED = {
    M.HELLO: {"id": int},
    M.HELLO_OK: {"id": int, "actor": str, "cls": str, "calls": list},
    M.CALL: {"id": int, "m": str, "a": list, "k": dict},
    M.TELL: {"m": str, "a": list, "k": dict},
    M.REPLY: {"id": int},
    M.ERROR: {"etype": str, "msg": str},
    M.STREAM: {"ch": int, "seq": int, "m": str},
    M.CREDIT: {"ch": int, "n": int},
    M.PING: {"id": int},
    M.PONG: {"id": int, "status": dict},
    M.STACK: {"id": int},
    M.STACK_REPLY: {"id": int, "report": dict},
    M.STOP: {"id": int},
    M.STOP_OK: {"id": int},
}

WRONG_VALUES = {
    int: [True, False, 1.0, "1", None, [1], b"1"],
    str: [b"inc", 1, None, ["inc"], True],
    list: [(1, 2), {"a": 1}, "abc", None, 1],
    dict: [[("a", 1)], "a", None, 1],
}


def test_every_type_is_covered():
    assert set(WELL_FORMED) == set(REQUIRED) == M.MESSAGE_TYPES


@pytest.mark.parametrize("kind", sorted(WELL_FORMED))
def test_accepts_every_well_formed_type(kind):
    msg = M.make(kind, **WELL_FORMED[kind])
    assert M.validate(msg) is msg
    # and after a trip through the codec (tuples stay tuples, ints stay ints)
    assert M.validate(codec.decode(codec.encode(msg))) == msg


def test_accepts_extra_fields_and_large_ids():
    M.validate(M.make(M.CALL, id=2**63, m="x", a=[], k={}, trace="abc"))
    M.validate(M.make(M.PING, id=-1))


@pytest.mark.parametrize("kind,field", [(k, f) for k in sorted(REQUIRED) for f in REQUIRED[k]])
def test_rejects_missing_field(kind, field):
    msg = M.make(kind, **WELL_FORMED[kind])
    del msg[field]
    with pytest.raises(ProtocolError, match=f"{kind} message: field '{field}' must be") as info:
        M.validate(msg)
    assert not isinstance(info.value, VersionMismatch)


@pytest.mark.parametrize("kind,field", [(k, f) for k in sorted(REQUIRED) for f in REQUIRED[k]])
def test_rejects_wrong_typed_field(kind, field):
    typ = REQUIRED[kind][field]
    for wrong in WRONG_VALUES[typ]:
        msg = M.make(kind, **{**WELL_FORMED[kind], field: wrong})
        with pytest.raises(ProtocolError, match=f"field '{field}' must be {typ.__name__}"):
            M.validate(msg)


def test_bool_is_not_an_int():
    with pytest.raises(ProtocolError, match="'id' must be int, got True"):
        M.validate(M.make(M.CALL, id=True, m="x", a=[], k={}))


@pytest.mark.parametrize("kind", ["nonsense", "", "CALL", None, 1, ["call"], b"call"])
def test_rejects_unknown_types(kind):
    msg = {"v": PROTOCOL_VERSION, "t": kind, "id": 1}
    with pytest.raises(ProtocolError, match="unknown message type"):
        M.validate(msg)


@pytest.mark.parametrize("value", [None, [], [{"v": 1}], "call", b"\x81", 1, (1,), 1.5])
def test_rejects_non_maps(value):
    with pytest.raises(ProtocolError, match=f"message is a {type(value).__name__}, expected a map"):
        M.validate(value)


@pytest.mark.parametrize("theirs", [0, PROTOCOL_VERSION - 1, PROTOCOL_VERSION + 1, 99,
                                    str(PROTOCOL_VERSION), None, -1])
def test_version_mismatch_names_both_versions(theirs):
    msg = M.make(M.CALL, id=1, m="x", a=[], k={})
    msg["v"] = theirs
    with pytest.raises(VersionMismatch) as info:
        M.validate(msg)
    text = str(info.value)
    # Each version where it belongs (a substring test fails on theirs 0 against ours 10).
    assert f"speaks rlmesh wire protocol {theirs!r}," in text
    assert f"this process speaks {PROTOCOL_VERSION};" in text
    assert info.value.theirs == theirs and info.value.ours == PROTOCOL_VERSION
    assert isinstance(info.value, ProtocolError)  # one except clause catches both


def test_missing_version_is_a_version_mismatch():
    with pytest.raises(VersionMismatch, match="None"):
        M.validate({"t": M.PING, "id": 1})


def test_version_is_checked_before_anything_else():
    # A peer on another version may use other types and fields: say so, not "unknown type".
    with pytest.raises(VersionMismatch):
        M.validate({"v": PROTOCOL_VERSION + 1, "t": "hello2", "session": "x"})


@pytest.mark.parametrize("theirs", [True, float(PROTOCOL_VERSION)])
def test_version_must_be_the_integer(theirs):
    msg = M.make(M.PING, id=1)
    msg["v"] = theirs
    with pytest.raises(VersionMismatch):
        M.validate(msg)


def test_call_id_of_is_best_effort():
    assert M.call_id_of({"id": 5}) == 5
    assert M.call_id_of({"id": True}) is None
    assert M.call_id_of({"id": "5"}) is None
    assert M.call_id_of([1]) is None
    assert M.call_id_of(None) is None
