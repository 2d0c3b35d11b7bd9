"""The named_actors setting read into specs, and a plain class served as an actor (which
calls it serves, how bad calls are refused); no processes, no sockets."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from rlmesh.config.settings import ConfigError
from rlmesh.named_actors import NamedActorHost, NamedActorSpec, hosted_class, parse_named_actors
from rlmesh.runtime import Actor
from rlmesh.runtime.actor import ActorServer, CallError


class Counter:
    """A plain user class."""

    def __init__(self, start: int = 0) -> None:
        self.n = start
        self.events: list[str] = []

    def increment(self, k: int = 1) -> int:
        self.n += k
        return self.n

    async def slow_get(self) -> int:
        await asyncio.sleep(0)
        return self.n

    @staticmethod
    def version(major: int) -> str:
        return f"{major}.0"

    @classmethod
    def kind(cls) -> str:
        return cls.__name__

    @property
    def doubled(self) -> int:  # not a method: not served
        return 2 * self.n

    def _private(self) -> None:
        pass

    def on_start(self) -> None:
        self.events.append("start")


class RuntimeCounter(Actor):
    def __init__(self, n: int = 0) -> None:
        self.n = n

    def get(self) -> int:
        return self.n


def test_a_setting_names_classes_by_path_class_or_dict():
    specs = parse_named_actors({
        "a": "pkg.mod:A",
        "b": Counter,
        "c": {"class": "pkg.mod:C", "kwargs": {"size": 3}, "max_restarts": 2},
    })
    assert specs == [NamedActorSpec("a", "pkg.mod:A"),
                     NamedActorSpec("b", f"{__name__}:Counter"),
                     NamedActorSpec("c", "pkg.mod:C", {"size": 3}, 2)]
    assert parse_named_actors({}) == [] and parse_named_actors(None) == []


@pytest.mark.parametrize("value, match", [
    (["pkg:A"], "must be a dict"),
    ({"has space": "pkg:A"}, "a name is letters"),
    ({"param_server": "pkg:A"}, "the run's own processes"),
    ({"learner-0": "pkg:A"}, "the run's own processes"),
    ({"a": 3}, "must be an import path"),
    ({"a": {"kwargs": {}}}, "no 'class'"),
    ({"a": {"class": "pkg:A", "kwarg": {}}}, r"unknown keys \['kwarg'\]"),
    ({"a": {"class": "pkg:A", "kwargs": [1]}}, "kwargs must be a dict"),
    ({"a": {"class": "pkg:A", "max_restarts": -1}}, "max_restarts must be an int >= 0"),
])
def test_a_bad_setting_says_what_is_wrong(value, match):
    with pytest.raises(ConfigError, match=match):
        parse_named_actors(value)


def _served(obj) -> ActorServer:
    return ActorServer(hosted_class(type(obj))(obj), "counter")


def test_a_plain_class_serves_its_public_methods_and_nothing_else():
    server = _served(Counter(5))
    assert sorted(server.methods) == ["increment", "kind", "slow_get", "version"]
    assert server.cls_path == f"{__name__}:Counter"  # errors name the user's class
    assert server.resolve("increment")(2) == 7
    assert server.resolve("version")(3) == "3.0" and server.resolve("kind")() == "Counter"
    assert inspect.iscoroutinefunction(server.resolve("slow_get"))
    assert asyncio.run(server.resolve("slow_get")()) == 7
    with pytest.raises(CallError, match=r"Counter serves no call 'doubled' \(it serves: "
                                        r"increment, kind, slow_get, version\)"):
        server.resolve("doubled")
    for hidden in ("_private", "_obj", "on_start", "__init__"):
        with pytest.raises(CallError, match="serves no call"):
            server.resolve(hidden)


def test_wrong_arguments_are_refused_by_the_users_signature():
    server = _served(Counter())
    assert server.bad_arguments("increment", [1], {}) is None
    assert "increment(k: 'int' = 1)" in str(server.bad_arguments("increment", [1, 2], {}))
    assert server.bad_arguments("version", [1], {}) is None  # a static method: no self
    assert server.bad_arguments("version", [], {}) is not None
    with pytest.raises(CallError, match="too many"):
        server._start(server.table.entries["increment"], [1, 2], {})


def test_lifecycle_hooks_of_the_plain_object_run():
    obj = Counter()
    actor = hosted_class(Counter)(obj)
    asyncio.run(actor.on_start())
    asyncio.run(actor.on_stop())  # Counter has none: nothing happens
    assert obj.events == ["start"]


def test_the_host_becomes_the_users_class():
    plain = NamedActorHost(f"{__name__}:Counter", {"start": 4})
    assert isinstance(plain, Actor) and type(plain).__qualname__ == "Counter"
    assert plain.increment() == 5
    runtime = NamedActorHost(f"{__name__}:RuntimeCounter", {"n": 2})
    assert type(runtime) is RuntimeCounter and runtime.get() == 2
    with pytest.raises(TypeError, match="not a class"):
        NamedActorHost(f"{__name__}:_served", {})
    with pytest.raises(TypeError, match="no public methods"):
        hosted_class(type("Empty", (), {}))
