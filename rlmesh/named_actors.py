"""Named actors from a user's script (RLlib's named Ray actors: a global counter, a
curriculum server): the classes a run starts from its ``named_actors`` setting, each in a
process of its own, the names of actors the driver started itself (``register_actor``, passed
to every run built afterwards), and ``get_actor(name)``, the synchronous handle that reaches
one from the driver, from envs and callbacks in the env runners, and from other actors."""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import os
import re
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlmesh.config.settings import ConfigError
from rlmesh.runtime.import_path import import_object, path_of
from rlmesh.runtime import Actor, ActorHandle, ActorUnavailable, RemoteError, RestartPolicy
from rlmesh.runtime.actor import public_methods
from rlmesh.runtime.job import Job, current_job, jobs_are_local
from rlmesh.runtime.run_dir import ENV_RUN_DIR, RunDir

__all__ = ["get_actor", "register_actor", "NamedActorHandle", "ActorMethod", "ActorNotFound",
           "RemoteError", "ActorUnavailable",
           "NamedActorSpec", "parse_named_actors", "start_named_actors", "spawn_named",
           "start_driver_actor"]

HOST = "rlmesh.named_actors:NamedActorHost"
SPEC_KEYS = ("class", "kwargs", "max_restarts")
# A name is a file name in the run directory (names/, sock/) and must not take a role's.
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")
_ROLE_NAME = re.compile(
    r"^(param_server|driver|(env_runner|eval_runner|learner|aggregator|replay_shard|agent|"
    r"policy_server|inference)-.*)$")


class ActorNotFound(LookupError):
    """No actor of that name in this run."""


# --- the setting ---

@dataclass(frozen=True)
class NamedActorSpec:
    """One entry of ``named_actors``: the actor's name, its class's import path, the keyword
    arguments it is built with (plain data, arrays), and how often it is started again if
    its process dies (0, as Ray's default: a counter that lost its state would lie)."""

    name: str
    cls: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    max_restarts: int = 0


def parse_named_actors(value: Any) -> list[NamedActorSpec]:
    """The specs of a ``named_actors`` setting, ``{name: "pkg.mod:Class" | Class |
    {"class": ..., "kwargs": {...}, "max_restarts": n}}``; ConfigError saying what is wrong."""
    if not value:
        return []
    if not isinstance(value, dict):
        raise ConfigError("named_actors must be a dict {name: 'pkg.module:Class'}, "
                         f"got {type(value).__name__}")
    return [_spec(name, entry) for name, entry in value.items()]


def _spec(name: Any, entry: Any, where: str = "") -> NamedActorSpec:
    where = where or f"named_actors[{name!r}]"
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(f"{where}: a name is letters, digits, '_', '.' or '-', starting with "
                         "a letter (at most 64)")
    if _ROLE_NAME.match(name):
        raise ConfigError(f"{where}: {name!r} is the name of one of the run's own processes; "
                         "pick another")
    entry = getattr(entry, "__rlmesh_class__", entry)  # @rlmesh.remote's wrapper: the class
    if isinstance(entry, (str, type)):
        entry = {"class": entry}
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be an import path 'pkg.module:Class', a class, or "
                         f"a dict with keys {SPEC_KEYS}; got {entry!r}")
    unknown = sorted(set(entry) - set(SPEC_KEYS))
    if unknown or "class" not in entry:
        raise ConfigError(f"{where}: " + (f"unknown keys {unknown}" if unknown else "no 'class'")
                         + f"; the keys are {SPEC_KEYS}")
    cls = getattr(entry["class"], "__rlmesh_class__", entry["class"])
    if isinstance(cls, str) and ":" not in cls:
        raise ConfigError(f"{where}: class {cls!r} must look like 'package.module:Class'")
    path = cls if isinstance(cls, str) else path_of(cls, f"{where} class")
    kwargs = entry.get("kwargs") or {}
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise ConfigError(f"{where}: kwargs must be a dict with string keys, got {kwargs!r}")
    restarts = entry.get("max_restarts", 0)
    if isinstance(restarts, bool) or not isinstance(restarts, int) or restarts < 0:
        raise ConfigError(f"{where}: max_restarts must be an int >= 0, got {restarts!r}")
    return NamedActorSpec(name, path, dict(kwargs), restarts)


def spawn_named(job: Job, spec: NamedActorSpec, role: str = "") -> Any:
    """Start one named actor in ``job`` (the coroutine of ``job.spawn``), registered there
    under ``spec.name``: the run's own and those the driver starts (``Counter.remote()``)."""
    return job.spawn(HOST, target=spec.cls, kwargs=spec.kwargs, name=spec.name,
                     role=role or spec.cls.rpartition(":")[2],
                     restart=RestartPolicy(max_restarts=spec.max_restarts))


async def start_driver_actor(job: Job, spec: NamedActorSpec, role: str) -> "NamedActorHandle":
    """Start an actor the driver asked for itself (``Counter.remote()``, rlmesh.driver.
    remote_actors) in ``job``: its synchronous handle, for any thread of the driver."""
    started = await spawn_named(job, spec, role)
    return NamedActorHandle(ActorHandle(started.address, spec.name), driver_started=True)


async def start_named_actors(job: Job, setting: Any) -> list[ActorHandle]:
    """Register in ``job`` the names of the actors the driver started and registered
    (``register_actor``), then start the actors ``setting`` names (supervised like the run's
    roles, they stop with it) and register theirs; what did not start is one error."""
    specs = parse_named_actors(setting)
    _pass_driver_actors(job, specs)
    if not specs:
        return []
    job.on_shutdown.append(functools.partial(_forget, str(job.run_dir.path)))
    # Every start is waited for, even after one failed, so that none is left half-started
    # when the job shuts down.
    got = await asyncio.gather(*(spawn_named(job, s) for s in specs), return_exceptions=True)
    for spec, result in zip(specs, got):
        if isinstance(result, BaseException):
            raise RuntimeError(f"named actor {spec.name!r} ({spec.cls}) did not start: "
                               f"{result}") from result
    return list(got)  # type: ignore[arg-type]


def _pass_driver_actors(job: Job, specs: list[NamedActorSpec]) -> None:
    """The driver's registered actors, by name in ``job``'s run directory, where its
    processes look names up as they do the run's own; refused in one line where the run's
    processes could not reach them (a launched cluster's nodes: the actors listen on this
    machine's ipc sockets)."""
    with _lock:
        names = dict(_driver_names)
    if not names:
        return
    listed = ", ".join(sorted(names))
    if not jobs_are_local():
        raise ConfigError(f"named actors {listed} were started in the driver (X.remote()), "
                          "which a launched cluster's nodes cannot reach; start them with the "
                          "run instead: config.callbacks(named_actors={name: Class})")
    taken = sorted(set(names) & {s.name for s in specs})
    if taken:
        raise ConfigError(f"named_actors: {', '.join(taken)} is already an actor the driver "
                          "registered (register_actor); pick another name")
    for name, handle in names.items():
        job.run_dir.register_name(name, handle._handle.address, os.getpid())


# --- the actor process ---

class NamedActorHost(Actor):
    """What the run spawns for a named actor: the user's class, imported in the actor's own
    process. A subclass of ``rlmesh.runtime.Actor`` is served as it is (its ``protocol`` if
    it declares one, else its public methods); a plain class is wrapped so that its public
    methods, and nothing else, are the calls served, as a Ray actor's are: a user's class
    declares its protocol by what it makes public."""

    def __new__(cls, target: str, kwargs: dict[str, Any]) -> Actor:  # type: ignore[misc]
        # The runtime spawns actors by class; this one picks the class it becomes.
        user_cls = import_object(target, "named actor class")
        user_cls = getattr(user_cls, "__rlmesh_class__", user_cls)  # decorated @rlmesh.remote
        if not isinstance(user_cls, type):
            raise TypeError(f"named actor class {target!r} is a {type(user_cls).__name__}, "
                            "not a class")
        if issubclass(user_cls, Actor):
            return user_cls(**kwargs)
        return hosted_class(user_cls)(user_cls(**kwargs))


class _Hosted(Actor):
    """Serves a plain object's public methods (one forwarding method each, made by
    ``hosted_class``). Its ``on_start``/``on_stop``, if it has them, run as an Actor's do."""

    spin_wait_us = 0  # coordination, not a hot path: no core held between calls

    def __init__(self, obj: Any) -> None:
        self._obj = obj

    async def on_start(self) -> None:
        await _maybe_await(getattr(self._obj, "on_start", None))

    async def on_stop(self) -> None:
        await _maybe_await(getattr(self._obj, "on_stop", None))


async def _maybe_await(hook: Any) -> None:
    if callable(hook):
        result = hook()
        if inspect.isawaitable(result):
            await result


def hosted_class(user_cls: type) -> type[Actor]:
    """An Actor class serving ``user_cls``'s public methods (async ones as tasks), named as
    ``user_cls`` in error replies and in ``rlmesh stack``."""
    methods = public_methods(user_cls)
    if not methods:
        raise TypeError(f"{user_cls.__module__}:{user_cls.__qualname__} has no public "
                        "methods: nothing could call it")
    namespace: dict[str, Any] = {name: _forwarder(user_cls, name, fn) for name, fn in methods.items()}
    namespace.update(__module__=user_cls.__module__, __qualname__=user_cls.__qualname__,
                     __doc__=user_cls.__doc__,
                     spin_wait_us=getattr(user_cls, "spin_wait_us", _Hosted.spin_wait_us))
    return type(user_cls.__name__, (_Hosted,), namespace)


def _forwarder(user_cls: type, name: str, fn: Any) -> Any:
    if inspect.iscoroutinefunction(fn):
        async def method(self: _Hosted, *args: Any, **kwargs: Any) -> Any:
            return await getattr(self._obj, name)(*args, **kwargs)
    else:
        def method(self: _Hosted, *args: Any, **kwargs: Any) -> Any:
            return getattr(self._obj, name)(*args, **kwargs)
    # The user's signature, so that a call with wrong arguments is refused by name
    # (ActorServer.bad_arguments) instead of failing inside the method.
    signature = inspect.signature(fn)
    if isinstance(inspect.getattr_static(user_cls, name), staticmethod):
        self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
        signature = signature.replace(parameters=[self_param, *signature.parameters.values()])
    method.__signature__ = signature  # type: ignore[attr-defined]
    method.__name__, method.__doc__ = name, fn.__doc__
    method.__qualname__ = f"{user_cls.__qualname__}.{name}"
    return method


# --- reaching one ---

class NamedActorHandle:
    """A synchronous handle to a named actor: ``h.call("increment", 1)`` (or ``h.increment(1)``)
    waits for the result (RemoteError if the method raised or is not served;
    ActorUnavailable after ``timeout`` seconds, 60 by default); ``h.tell("increment", 1)``
    sends without waiting; ``h.increment.remote(1)`` is Ray's form, a Future that
    ``rlmesh.get`` waits on. Safe from any thread; calls from one process are serialised."""

    def __init__(self, handle: ActorHandle, driver_started: bool = False) -> None:
        self._handle = handle
        self.name = handle.name
        # Started by this driver (Counter.remote()), not by a run: register_actor passes
        # its names to later runs, rlmesh.kill stops it.
        self.driver_started = driver_started
        self._sender: ThreadPoolExecutor | None = None  # Ray-style .remote() calls, in order

    def call(self, method: str, *args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
        """Call ``method`` with plain data or arrays and return its result."""
        self._handle._check_alive()  # stopped by rlmesh.kill: say so now, not after timeout
        return self._handle.call_sync(method, *args, timeout=timeout, **kwargs)

    def tell(self, method: str, *args: Any, **kwargs: Any) -> None:
        """Send a call without waiting; a failure is logged by the actor, not raised here."""
        self._handle._check_alive()
        self._handle.tell_sync(method, *args, **kwargs)

    def __getattr__(self, method: str) -> "ActorMethod":
        # The actor's methods as attributes, as on a Ray actor handle; `call`, `tell`, `name`
        # and `driver_started` are the handle's own (an actor method of that name:
        # h.call("call", ...)).
        if method.startswith("_"):
            raise AttributeError(method)
        return ActorMethod(self, method)

    def _submit(self, method: str, args: tuple, kwargs: dict) -> Future:
        with _lock:
            if self._sender is None:
                self._sender = ThreadPoolExecutor(1, thread_name_prefix=f"actor-{self.name}")
        return self._sender.submit(self.call, method, *args, **kwargs)

    def __repr__(self) -> str:
        return f"NamedActorHandle({self.name!r})"


class ActorMethod:
    """``h.inc`` of a NamedActorHandle: ``h.inc(1)`` calls and waits (``h.call("inc", 1)``);
    ``h.inc.remote(1)`` sends the call at once, in order with this process's other
    ``.remote`` calls to the actor, and returns a ``concurrent.futures.Future`` of its result
    (``rlmesh.get(future)``, Ray's ``ray.get``)."""

    def __init__(self, handle: NamedActorHandle, method: str) -> None:
        self._handle, self._method = handle, method

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._handle.call(self._method, *args, **kwargs)

    def remote(self, *args: Any, **kwargs: Any) -> Future:
        return self._handle._submit(self._method, args, kwargs)

    def __repr__(self) -> str:
        return f"ActorMethod({self._handle.name!r}, {self._method!r})"


def register_actor(name: str, handle: Any) -> None:
    """Ray's ``named_actors.register_actor(name, handle)``. A handle ``Counter.remote()``
    returned: ``get_actor(name)`` reaches the actor from this driver and from the processes
    of every algorithm built here afterwards. A run's handle (from ``get_actor``): a second
    name of that actor in this run."""
    if not isinstance(handle, NamedActorHandle):
        raise TypeError(f"register_actor({name!r}, ...) takes the handle YourClass.remote() "
                        f"returns (or get_actor's), got {type(handle).__name__}; or start "
                        f"the actor with the run: config.callbacks(named_actors={{{name!r}: "
                        "YourClass}) (docs/named_actors.md)")
    _spec(name, {"class": HOST}, f"register_actor({name!r}, ...)")  # the name's rules
    if handle.driver_started:
        with _lock:
            other = _driver_names.get(name)
            if other is not None and other is not handle:
                raise ValueError(f"register_actor({name!r}, ...): that name is {other.name}'s; "
                                 "pick another, or rlmesh.kill the other actor first")
            _driver_names[name] = handle
        return
    if name == handle.name:
        return
    run_dir = _run_dir()
    owner = json.loads((run_dir.path / "names" / f"{handle.name}.json").read_text())["pid"]
    run_dir.register_name(name, handle._handle.address, owner)


_handles: dict[tuple[str, str], NamedActorHandle] = {}
_driver_names: dict[str, NamedActorHandle] = {}  # register_actor's names of driver-started actors
_lock = threading.Lock()


def get_actor(name: str, timeout: float = 10.0) -> NamedActorHandle:
    """The actor named ``name`` in this process's run: from the driver script (while the
    algorithm runs), from env code and callbacks in env runners, from other actors. Waits up
    to ``timeout`` seconds for the name to be registered; one handle per process and name.
    A name this driver registered (``register_actor``) is found at once, run or none."""
    with _lock:
        if name in _driver_names:
            return _driver_names[name]
        registered = sorted(_driver_names)
    if current_job() is None and not os.environ.get(ENV_RUN_DIR) and registered:
        raise ActorNotFound(f"no actor named {name!r} (registered: {', '.join(registered)}); "
                            "register one with named_actors.register_actor(name, "
                            "YourClass.remote())")
    run_dir = _run_dir()
    key = (str(run_dir.path), name)
    with _lock:
        if key not in _handles:
            _handles[key] = NamedActorHandle(ActorHandle(_lookup(run_dir, name, timeout), name))
        return _handles[key]


def _run_dir() -> RunDir:
    job = current_job()
    if job is not None:
        return job.run_dir
    path = os.environ.get(ENV_RUN_DIR)
    if not path:
        raise RuntimeError("rlmesh.get_actor: no run in this process and no actor registered "
                           "in this driver: call it while an algorithm runs (after build(), "
                           "before stop()), or from code the run's processes run (envs, "
                           "callbacks, actors), or register one first with "
                           "named_actors.register_actor(name, YourClass.remote())")
    return RunDir(Path(path))


def _lookup(run_dir: RunDir, name: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while (address := run_dir.lookup_name(name)) is None:
        if time.monotonic() > deadline:
            known = sorted(p.stem for p in (run_dir.path / "names").glob("*.json")
                           if not _ROLE_NAME.match(p.stem))
            raise ActorNotFound(f"no actor named {name!r} in run {run_dir.job_id} (named "
                                f"actors: {', '.join(known) or 'none'}); start one with the "
                                "named_actors setting, or register_actor(name, "
                                "YourClass.remote()) in the driver before building the run")
        time.sleep(0.05)
    return address


def forget_driver_actor(handle: NamedActorHandle) -> None:
    """``handle``'s names unregistered in this driver and its connection closed (the actor
    was stopped: rlmesh.kill, or the driver's exit)."""
    with _lock:
        for name in [n for n, h in _driver_names.items() if h is handle]:
            del _driver_names[name]
    handle._handle.mark_dead("stopped (rlmesh.kill)", permanent=True)
    handle._handle.close()
    if handle._sender is not None:
        handle._sender.shutdown(wait=False, cancel_futures=True)


def _forget(run_dir: str) -> None:
    """Close this process's handles into a run that is shutting down."""
    with _lock:
        for key in [k for k in _handles if k[0] == run_dir]:
            handle = _handles.pop(key)
            handle._handle.close()
            if handle._sender is not None:
                handle._sender.shutdown(wait=False, cancel_futures=True)
