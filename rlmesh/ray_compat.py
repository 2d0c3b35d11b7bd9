"""Ray's calls as RLlib scripts make them: ``ray.init()`` and ``ray.shutdown()`` (rlmesh needs
no cluster runtime: each Algorithm starts and stops its own processes, so both do nothing and
say so once), ``ray.get`` of a named actor's ``.remote()`` call, and ``@ray.remote``."""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("rlmesh")

# ray.init's keywords (Ray 0.7 to 2.x); others are refused as ray.init refuses them.
INIT_KEYWORDS = frozenset({
    "address", "num_cpus", "num_gpus", "resources", "labels", "object_store_memory",
    "local_mode", "ignore_reinit_error", "include_dashboard", "dashboard_host",
    "dashboard_port", "job_config", "configure_logging", "logging_level", "logging_format",
    "logging_config", "log_to_driver", "namespace", "runtime_env", "storage", "memory",
    "redis_address", "redis_password", "redis_max_memory", "num_redis_shards", "node_ip_address",
    "driver_object_store_memory", "huge_pages", "include_webui", "webui_host", "plasma_directory",
    "temp_dir", "load_code_from_local", "use_pickle", "lru_evict", "_temp_dir", "_system_config",
    "_memory", "_redis_password", "_plasma_directory", "_node_ip_address",
    "_driver_object_store_memory",
    "_enable_object_reconstruction", "_lru_evict", "_metrics_export_port", "_tracing_startup_hook",
    "_node_name", "_load_code_from_local", "_java_worker_options", "_skip_env_hook",
})

_said: set[str] = set()
_initialized = False


def _say_once(what: str, line: str) -> None:
    if what not in _said:
        _said.add(what)
        logger.warning("%s", line)


def init(address: str | None = None, **kwargs: Any) -> None:
    """Ray's ``ray.init()``: nothing to start in rlmesh (an Algorithm starts its own env
    runner and learner processes; ``rlmesh launch cluster.toml`` runs on several nodes).
    Takes ray.init's keywords, which have no effect; says so once."""
    global _initialized
    unknown = sorted(set(kwargs) - INIT_KEYWORDS)
    if unknown:
        raise TypeError(f"rlmesh.init() got an unexpected keyword argument {unknown[0]!r} "
                        "(it takes ray.init's keywords, none of which rlmesh needs)")
    _initialized = True
    given = ([f"address={address!r}"] if address is not None else []) + sorted(kwargs)
    where = (" for a cluster, write cluster.toml and run `rlmesh launch cluster.toml`;"
             if address not in (None, "local") else "")
    _say_once("init", "rlmesh.init(): rlmesh needs no cluster runtime (no Ray): each algorithm "
              f"starts and stops its own processes, so this does nothing;{where} "
              + (f"its arguments ({', '.join(given)}) have no effect" if given
                 else "remove the call when you like"))


def shutdown(**kwargs: Any) -> None:
    """Ray's ``ray.shutdown()``: nothing to stop (``algo.stop()`` stops an algorithm's
    processes, and every process dies with the script); says so once."""
    global _initialized
    _initialized = False
    _say_once("shutdown", "rlmesh.shutdown(): rlmesh needs no cluster runtime (no Ray), so "
              "there is nothing to shut down; algo.stop() stops an algorithm's processes")


def is_initialized() -> bool:
    """Ray's ``ray.is_initialized()``: whether ``init()`` was called (and not shut down)."""
    return _initialized


def get(refs: Any, *, timeout: float | None = None) -> Any:
    """Ray's ``ray.get``: the result of a named actor's ``h.method.remote(...)`` (a Future),
    or the list of results of a list of them; waits up to ``timeout`` seconds."""
    from concurrent.futures import Future

    if isinstance(refs, Future):
        return refs.result(timeout)
    if isinstance(refs, (list, tuple)) and all(isinstance(r, Future) for r in refs):
        return [r.result(timeout) for r in refs]
    raise TypeError(f"rlmesh.get takes what a named actor's method.remote(...) returns (or a "
                    f"list of them), got {type(refs).__name__}")


class RemoteClass:
    """What ``@rlmesh.remote`` makes of a class: the class itself for the ``named_actors``
    setting (``__rlmesh_class__``), with Ray's ``.remote()`` refused in one line, since rlmesh
    starts named actors with the run."""

    def __init__(self, cls: type) -> None:
        self.__rlmesh_class__ = cls
        self.__name__, self.__qualname__ = cls.__name__, cls.__qualname__
        self.__module__, self.__doc__ = cls.__module__, cls.__doc__

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        name = self.__name__
        raise TypeError(f"{name}.remote(): rlmesh starts a named actor with the run: "
                        f"config.callbacks(named_actors={{'my_name': {name}}}) (its arguments "
                        f"as {{'class': {name}, 'kwargs': {{...}}}}), then "
                        f"get_actor('my_name') reaches it (docs/named_actors.md)")

    def options(self, **kwargs: Any) -> "RemoteClass":
        return self  # .options(name=...).remote() is refused by remote() in the same words


def remote(*args: Any, **kwargs: Any) -> Any:
    """Ray's ``@ray.remote`` on a class (with or without options): a RemoteClass, which the
    ``named_actors`` setting takes. rlmesh has no remote functions (tasks): refused."""
    if len(args) == 1 and not kwargs and callable(args[0]):
        target = args[0]
        if not isinstance(target, type):
            raise TypeError(f"@rlmesh.remote on function {target.__name__!r}: rlmesh has no "
                            "remote tasks; call it directly, or make it a method of a class "
                            "started as a named actor (docs/named_actors.md)")
        return RemoteClass(target)
    return remote  # @remote(num_cpus=1): Ray's resource options place nothing here
