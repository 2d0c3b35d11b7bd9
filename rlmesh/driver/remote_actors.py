"""Actors the driver script starts itself, as Ray's ``Counter.remote()`` does (``@rlmesh.remote``
makes the class): each a child process of the driver, started by a runtime Job on an event loop
of its own, stopped by ``rlmesh.kill(handle)`` or when the driver exits, however it ends."""

from __future__ import annotations

import atexit
import inspect
import itertools
import logging
import threading
from typing import Any

from rlmesh.driver.loop import LoopThread
from rlmesh.named_actors import (NamedActorHandle, NamedActorSpec, forget_driver_actor,
                                 register_actor, start_driver_actor)
from rlmesh.runtime.import_path import path_of, stop_if_importing_script
from rlmesh.runtime.job import Job

__all__ = ["remote", "RemoteClass", "kill"]

log = logging.getLogger("rlmesh")

START_TIMEOUT_S = 60.0
# Ray's options that reserve resources: nothing is reserved on one machine, so they are
# taken and said once; `lifetime="detached"` (outliving the driver) is refused.
RESOURCE_OPTIONS = frozenset({"num_cpus", "num_gpus", "memory", "resources",
                              "max_concurrency", "max_task_retries", "namespace"})

_lock = threading.RLock()  # one start or stop at a time: the job is made and ended under it
_loop: LoopThread | None = None
_job: Job | None = None
_ids = itertools.count(1)
_started: list[NamedActorHandle] = []
_said: set[str] = set()


class RemoteClass:
    """What ``@rlmesh.remote`` makes of a class: ``Counter.remote(*args, **kwargs)`` starts it
    as an actor of this driver (``start_actor``); ``Counter.options(name=..., max_restarts=n)``
    as Ray's; the class itself (``__rlmesh_class__``) for the ``named_actors`` setting."""

    def __init__(self, cls: type, options: dict[str, Any] | None = None) -> None:
        self.__rlmesh_class__ = cls
        self.__name__, self.__qualname__ = cls.__name__, cls.__qualname__
        self.__module__, self.__doc__ = cls.__module__, cls.__doc__
        self._options = options or {}

    def remote(self, *args: Any, **kwargs: Any) -> NamedActorHandle:
        return start_actor(self.__rlmesh_class__, args, kwargs, **self._options)

    def options(self, *, name: str | None = None, max_restarts: int = 0,
                lifetime: str | None = None, **resources: Any) -> "RemoteClass":
        """Ray's ``Counter.options(name="counter").remote()``: started and registered under
        ``name``; ``max_restarts`` as Ray's (0: a counter that lost its state would lie)."""
        unknown = sorted(set(resources) - RESOURCE_OPTIONS)
        if unknown:
            raise TypeError(f"{self.__name__}.options(): rlmesh takes name, max_restarts and "
                            f"Ray's resource options, not {unknown[0]!r}")
        if lifetime not in (None, "non_detached"):
            raise TypeError(f"{self.__name__}.options(lifetime={lifetime!r}): an rlmesh actor "
                            "dies with the driver that started it; leave lifetime out")
        if resources and "options" not in _said:
            _said.add("options")
            log.warning("%s.options(%s): nothing is reserved for an actor on this machine; "
                        "these have no effect", self.__name__, ", ".join(sorted(resources)))
        return RemoteClass(self.__rlmesh_class__, {"name": name, "max_restarts": max_restarts})


def remote(*args: Any, **kwargs: Any) -> Any:
    """Ray's ``@ray.remote`` on a class (with or without options): a RemoteClass. rlmesh has
    no remote functions (tasks): refused."""
    if len(args) == 1 and not kwargs and callable(args[0]):
        target = args[0]
        if not isinstance(target, type):
            raise TypeError(f"@rlmesh.remote on function {target.__name__!r}: rlmesh has no "
                            "remote tasks; call it directly, or make it a method of a class "
                            "started as a named actor (docs/named_actors.md)")
        return RemoteClass(target)
    return remote  # @remote(num_cpus=1): Ray's resource options place nothing here


def start_actor(cls: type, args: tuple, kwargs: dict[str, Any], name: str | None = None,
                max_restarts: int = 0) -> NamedActorHandle:
    """``cls(*args, **kwargs)`` as an actor process of this driver: a handle whose
    ``h.method.remote(...)`` gives what ``rlmesh.get`` waits on and ``h.method(...)`` calls
    and waits."""
    # A process importing the driver's script for its definitions (an env runner, this very
    # actor) stops the import here, as at a run the script starts: the driver's actor is
    # reached by name there, and a second one (or one per runner) would count apart.
    stop_if_importing_script(f"{cls.__name__}.remote()")
    by_name = constructor_kwargs(cls, args, kwargs)
    spec = NamedActorSpec(f"{cls.__name__}-{next(_ids)}", path_of(cls, "actor class"), by_name,
                          max_restarts)
    with _lock:
        loop, job = _driver_job()
        try:
            handle = loop.run(start_driver_actor(job, spec, cls.__name__), START_TIMEOUT_S)
        finally:
            _end_if_idle()
        _started.append(handle)
    if name is not None:
        try:
            register_actor(name, handle)
        except BaseException:  # a name refused: no actor left running unnamed
            kill(handle)
            raise
    return handle


def constructor_kwargs(cls: type, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``cls``'s constructor arguments by name (the actor process builds it from them);
    a call its signature refuses is refused here, in Ray's words, before anything starts."""
    where = f"{cls.__name__}.remote()"
    signature = inspect.signature(cls)
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"{where}: {exc}") from None
    by_name: dict[str, Any] = {}
    for key, value in bound.arguments.items():
        kind = signature.parameters[key].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            by_name.update(value)
        elif kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.POSITIONAL_ONLY):
            raise TypeError(f"{where}: an actor is built from arguments by name, and "
                            f"{cls.__name__}'s {key!r} has none; give its constructor named "
                            "parameters")
        else:
            by_name[key] = value
    return by_name


def kill(handle: Any, *, no_restart: bool = True) -> None:
    """Ray's ``ray.kill(actor)``: stop an actor this driver started (``Counter.remote()``)
    now; its names are forgotten and calls on its handle fail at once (ActorUnavailable)."""
    if not isinstance(handle, NamedActorHandle) or not handle.driver_started:
        raise TypeError(f"rlmesh.kill takes a handle that YourClass.remote() returned, got "
                        f"{handle!r}; a run's named actor stops with the run (algo.stop())")
    with _lock:
        if handle not in _started:
            return  # killed already, as Ray's kill of a dead actor
        _started.remove(handle)
        forget_driver_actor(handle)
        assert _loop is not None and _job is not None
        try:
            _loop.run(_job.stop_actor(handle.name), 30)
        finally:
            _end_if_idle()


def _driver_job() -> tuple[LoopThread, Job]:
    """This driver's job for its own actors (made at the first start). Its loop's thread
    starts the processes: Linux ties a child's death signal to the thread that started it,
    and this one lives as long as one of its actors does."""
    global _loop, _job
    if _job is None:
        loop = LoopThread()
        job = Job("ipc")
        try:
            loop.run(job.start(current=False), START_TIMEOUT_S)
        except BaseException:
            loop.close()
            raise
        _loop, _job = loop, job
    assert _loop is not None
    return _loop, _job


def _end_if_idle() -> None:
    """With no actor left, the job and its loop end (a later start makes new ones)."""
    global _loop, _job
    if _job is None or _job.handles or _loop is None:
        return
    try:
        _loop.run(_job.shutdown(), 30)
    finally:
        _loop.close()
        _loop, _job = None, None


@atexit.register
def _stop_all() -> None:
    """At the driver's exit, every actor it started, stopped gracefully (their ``on_stop``
    runs); a driver that dies otherwise takes them with it (their lifeline and death signal)."""
    with _lock:
        for handle in list(_started):
            forget_driver_actor(handle)
        _started.clear()
        if _job is not None:
            _job.handles.clear()
            _end_if_idle()
