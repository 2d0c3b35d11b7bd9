"""Dispatch decisions over a declared protocol, without sockets: what is served, as what,
what is refused (UnknownCall, BadRequest) and why, test hooks, constructor arguments."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from rlmesh.runtime import Actor
from rlmesh.runtime.actor import ActorServer, table_of
from rlmesh.runtime.protocol import CALL, STREAM, TELL, CallError, Protocol, Table


class Shard(Actor):
    """A declared actor: two calls, a tell, a stream and a test hook; more public methods."""

    protocol = Protocol(calls=("sample", "stats"), tells=("update",), streams=("add",),
                        test_hooks=("pid",))

    def __init__(self, capacity: int, name: str = "shard") -> None:
        self.capacity, self.label, self.added = capacity, name, []

    def sample(self, num_items: int, beta: float = 0.4, ids: list[int] | None = None) -> dict:
        return {"n": num_items, "beta": beta, "ids": ids}

    def stats(self) -> dict[str, Any]:
        return {"added": len(self.added)}

    def update(self, idx: np.ndarray, td: np.ndarray) -> None:
        pass

    async def add(self, fragment: dict[str, Any]) -> None:
        self.added.append(fragment)

    def pid(self) -> int:
        return 42

    def helper(self) -> str:  # public, but not declared: not served
        return "internal"

    def _private(self) -> str:
        return "secret"


class BigShard(Shard):
    protocol = Shard.protocol.extend(calls=("helper",))


def server(cls: type = Shard, hooks: bool = False, **kwargs: Any) -> ActorServer:
    srv = ActorServer(cls(capacity=8, **kwargs), "shard")
    srv.table = table_of(cls, hooks=hooks)
    return srv


def refused(srv: ActorServer, kind: str, name: str, args: list | None = None,
            kwargs: dict | None = None) -> CallError:
    with pytest.raises(CallError) as info:
        srv.decide(kind, name, args or [], kwargs or {})
    return info.value


def test_declared_calls_are_served_as_their_kind():
    srv = server()
    assert set(srv.table.entries) == {"sample", "stats", "update", "add"}
    entry = srv.decide(CALL, "sample", [3], {"beta": 0.5})
    assert entry.name == "sample" and not entry.is_async
    assert srv._start(entry, [3], {"beta": 0.5}) == {"n": 3, "beta": 0.5, "ids": None}
    assert srv.decide(TELL, "update", [np.zeros(2), np.ones(2)], {}).kinds == (TELL,)
    assert srv.decide(STREAM, "add", [{"x": 1}], {}).is_async


@pytest.mark.parametrize("name", ["helper", "_private", "__init__", "on_start", "capacity",
                                  "pid", "nope", "", "sample "])
def test_anything_else_is_an_unknown_call_naming_what_is_served(name):
    err = refused(server(), CALL, name)
    assert err.etype == "UnknownCall"
    assert repr(name) in str(err) and f"{__name__}:Shard" in str(err)
    assert "(it serves: add, sample, stats, update)" in str(err)


def test_a_call_sent_as_another_kind_is_a_bad_request():
    srv = server()
    err = refused(srv, TELL, "sample", [1])
    assert err.etype == "BadRequest" and "'sample' is served as a call, not as a tell" in str(err)
    assert refused(srv, CALL, "add", [{}]).etype == "BadRequest"
    assert refused(srv, STREAM, "stats", [None]).etype == "BadRequest"


@pytest.mark.parametrize("args,kwargs,argument", [
    (["3"], {}, "'num_items' must be int, got str"),
    ([3, "high"], {}, "'beta' must be float | int, got str"),
    ([3], {"beta": None}, "'beta' must be float | int, got NoneType"),
    ([3], {"ids": {"a": 1}}, "'ids' must be list | tuple | None, got dict"),
])
def test_an_argument_of_the_wrong_type_is_a_bad_request_naming_it(args, kwargs, argument):
    err = refused(server(), CALL, "sample", args, kwargs)
    assert err.etype == "BadRequest" and argument in str(err)


def test_types_are_those_the_wire_delivers():
    srv = server()
    assert srv.bad_arguments("sample", [3, 1], {}) is None  # an int for a float
    assert srv.bad_arguments("sample", [3], {"ids": (1, 2)}) is None  # a tuple for a list
    assert srv.bad_arguments("sample", [3], {"ids": None}) is None


@pytest.mark.parametrize("args,kwargs,why", [
    ([], {}, "missing a required argument: 'num_items'"),
    ([1, 0.5, [], 4], {}, "too many positional arguments"),
    ([1], {"gamma": 2}, "unexpected keyword argument 'gamma'"),
])
def test_arity_is_refused_by_the_signature_as_a_bad_request(args, kwargs, why):
    srv = server()
    err = srv.bad_arguments("sample", args, kwargs)
    assert err is not None and err.etype == "BadRequest" and why in str(err)
    with pytest.raises(CallError, match=why):  # and where a call fails on it
        srv._start(srv.table.entries["sample"], args, kwargs)


def test_test_hooks_are_served_only_with_test_hooks_on():
    assert refused(server(hooks=False), CALL, "pid").etype == "UnknownCall"
    srv = server(hooks=True)
    assert srv._start(srv.decide(CALL, "pid", [], {}), [], {}) == 42
    assert refused(srv, TELL, "pid").etype == "BadRequest"  # a hook is a call


def test_the_env_switches_test_hooks(monkeypatch):
    monkeypatch.setenv("RLMESH_TEST_HOOKS", "0")
    assert "pid" not in Table(Shard, Shard.protocol).entries
    monkeypatch.setenv("RLMESH_TEST_HOOKS", "1")
    assert "pid" in Table(Shard, Shard.protocol).entries


def test_a_subclass_serves_its_declaration_and_inherits_one_unchanged():
    assert server(BigShard).decide(CALL, "helper", [], {}).name == "helper"

    class Quiet(Shard):  # declares nothing: its base's protocol, not its public methods
        def extra(self) -> None:
            pass

    assert refused(server(Quiet), CALL, "extra").etype == "UnknownCall"


def test_declaring_what_is_not_a_public_method_fails_at_once():
    for name in ("capacity_", "_private", "on_start", "label"):
        with pytest.raises(TypeError, match=repr(name)):
            Table(Shard, Protocol(calls=(name,)))


def test_constructor_arguments_are_checked_by_name():
    table = table_of(Shard)
    table.check_constructor({"capacity": 4, "name": "x"})
    with pytest.raises(TypeError, match=r"no constructor argument 'capcity'; it takes: "
                                        r"capacity, name"):
        table.check_constructor({"capcity": 4})
    with pytest.raises(TypeError, match="missing a required argument: 'capacity'"):
        table.check_constructor({})
    with pytest.raises(TypeError, match="'capacity' must be int, got str"):
        table.check_constructor({"capacity": "4"})
    with pytest.raises(TypeError, match="takes no constructor arguments"):
        table_of(Actor).check_constructor({"x": 1})


def test_an_undeclared_user_actor_serves_its_public_methods_as_any_kind():
    class User(Actor):
        def ping(self, n: int) -> int:
            return n

    srv = ActorServer(User(), "user")
    for kind in (CALL, TELL, STREAM):
        assert srv.decide(kind, "ping", [1], {}).name == "ping"
    assert refused(srv, CALL, "on_start").etype == "UnknownCall"


def test_requests_and_replies_read_as_declared():
    entry = table_of(Shard).entries["sample"]
    assert entry.request_text() == "num_items: int, beta: float = 0.4, ids: list[int] | None = None"
    assert entry.reply == "dict"
