"""Ray's calls as RLlib scripts make them: ``ray.init()`` and ``ray.shutdown()`` (rlmesh needs
no cluster runtime: each Algorithm starts and stops its own processes, so both do nothing and
say so once) and ``ray.get`` of an actor's ``.remote()`` call. ``@ray.remote``,
``Counter.remote()`` and ``ray.kill`` are rlmesh.driver.remote_actors'."""

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
