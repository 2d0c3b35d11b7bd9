"""Which methods of an actor without a declared protocol (a user's actor: its public methods)
a message may call, and how bad calls are refused; no sockets. Declared protocols:
test_protocol.py."""

from __future__ import annotations

import asyncio
import functools

import pytest

from rlmesh.runtime import Actor
from rlmesh.runtime.actor import ActorServer, CallError, public_methods


def logged(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)
    return wrapper


class Base(Actor):
    def shared(self) -> str:
        return "base"

    def overridden(self) -> str:
        return "base"

    def later_hidden(self) -> str:
        return "base"

    async def aping(self) -> str:
        return "pong"

    def _private(self) -> str:
        return "secret"

    def __secret__(self) -> str:
        return "dunder"


class Child(Base):
    limit = 3  # a class attribute, not a method
    later_hidden = None  # overrides a method with something that is not one

    def __init__(self, scale: int = 1) -> None:
        self.scale = scale

    def overridden(self) -> str:
        return "child"

    def own(self, a, b=2, *, c):
        return (a * self.scale, b, c)

    def anything(self, *args, **kwargs):
        return (args, kwargs)

    @logged  # a decorated method keeps its signature
    def cached(self, x: int) -> int:
        return x

    async def on_start(self) -> None:
        self.started = True

    def on_stop(self) -> None:  # a lifecycle hook, even when not async
        pass

    def _helper(self) -> None:
        pass


def _server(actor: Actor | None = None) -> ActorServer:
    return ActorServer(actor or Child(scale=10), "child")


def arg_error(server: ActorServer, method: str, args: list, kwargs: dict) -> CallError | None:
    """The CallError a call with these arguments would get, or None if it is fine.

    Covers both shapes of the API: ``bad_arguments`` (returns the error) and the older
    ``bind_args`` (raises it).
    """
    try:
        if hasattr(server, "bad_arguments"):
            return server.bad_arguments(method, args, kwargs)
        server.bind_args(method, args, kwargs)
    except CallError as exc:
        return exc
    return None


def test_public_methods_are_public_and_below_actor():
    assert set(public_methods(Child)) == {"shared", "overridden", "aping", "own", "anything", "cached"}
    assert set(public_methods(Base)) == {"shared", "overridden", "later_hidden", "aping"}
    assert public_methods(Actor) == {}


def test_subclass_overrides_are_what_runs():
    methods = public_methods(Child)
    assert methods["overridden"] is Child.__dict__["overridden"]
    assert methods["shared"] is Base.__dict__["shared"]
    server = _server()
    assert server.resolve("overridden")() == "child"
    assert server.resolve("shared")() == "base"  # inherited
    assert asyncio.run(server.resolve("aping")()) == "pong"


def test_resolve_gives_a_method_bound_to_this_actor():
    server = _server(Child(scale=7))
    assert server.resolve("own")(2, c=0) == (14, 2, 0)


@pytest.mark.parametrize("name", [
    "_private", "__secret__", "_helper", "__init__", "__class__", "__dict__", "__getattribute__",
    "on_start", "on_stop",  # lifecycle hooks
    "job", "name", "limit", "scale", "later_hidden",  # attributes, or a method hidden by one
    "mro", "__reduce__", "__subclasshook__",  # inherited from object/type
    "", "own ", "Own", "shared.__globals__",
])
def test_not_callable_remotely(name):
    server = _server()
    with pytest.raises(CallError) as info:
        server.resolve(name)
    assert info.value.etype == "UnknownCall"
    err = arg_error(server, name, [], {})
    assert err is not None and err.etype == "UnknownCall"


def test_unknown_method_error_lists_the_available_ones():
    with pytest.raises(CallError) as info:
        _server().resolve("nope")
    text = str(info.value)
    assert "'nope'" in text
    assert "(it serves: anything, aping, cached, overridden, own, shared)" in text
    assert ":Child" in text  # the class path, so the user knows which actor answered


def test_unknown_method_on_an_actor_without_methods():
    class Empty(Actor):
        pass

    with pytest.raises(CallError, match=r"\(it serves: none\)"):
        _server(Empty()).resolve("x")


@pytest.mark.parametrize("args,kwargs", [
    ([1], {"c": 3}), ([1, 5], {"c": 3}), ([], {"a": 1, "b": 2, "c": 3}),
])
def test_good_arguments_pass(args, kwargs):
    assert arg_error(_server(), "own", args, kwargs) is None


@pytest.mark.parametrize("args,kwargs,why", [
    ([], {}, "missing a required argument: 'a'"),
    ([1], {}, "missing a required argument: 'c'"),
    ([1, 2, 3], {"c": 4}, "too many positional arguments"),
    ([1], {"c": 3, "d": 4}, "unexpected keyword argument 'd'"),
    ([1], {"c": 3, "a": 2}, "multiple values for argument 'a'"),
])
def test_wrong_arguments_are_bad_requests(args, kwargs, why):
    err = arg_error(_server(), "own", args, kwargs)
    assert err is not None and err.etype == "BadRequest"
    assert why in str(err)
    assert "own(a, b=2, *, c)" in str(err)  # the signature, so the caller can fix the call


def test_non_string_keyword_names_are_bad_requests():
    err = arg_error(_server(), "anything", [], {1: "x"})
    assert err is not None and err.etype == "BadRequest"
    assert "keyword names must be strings" in str(err)


def test_varargs_accept_anything():
    server = _server()
    assert arg_error(server, "anything", [1, [2], {"x": 3}], {"k": None}) is None
    assert server.resolve("anything")(1, k=2) == ((1,), {"k": 2})


def test_async_and_wrapped_methods_check_arity_too():
    server = _server()
    assert arg_error(server, "aping", [], {}) is None
    err = arg_error(server, "aping", [1], {})
    assert err is not None and err.etype == "BadRequest"
    assert arg_error(server, "cached", [1], {}) is None
    err = arg_error(server, "cached", [], {})
    assert err is not None and err.etype == "BadRequest"


def test_unknown_method_checked_before_arguments():
    err = arg_error(_server(), "nope", [1, 2, 3], {1: 2})
    assert err is not None and err.etype == "UnknownCall"


def test_server_names_its_class_path():
    server = _server()
    assert server.cls_path == f"{__name__}:Child"
    assert set(server.methods) == set(public_methods(Child))
