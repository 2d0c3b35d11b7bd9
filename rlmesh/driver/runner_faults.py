"""Actors' deaths as the user sees them: the restart policy each role names (a runner's:
restarts, deaths within a window of its env steps, memory limit: from the config), and the one line
that ends a run whose env keeps taking its runner down (``EnvCrashed``)."""

from __future__ import annotations

from typing import Any

from rlmesh.config.base import AlgorithmConfig
from rlmesh.roles.env_runner import RUNNER_WORK
from rlmesh.runtime import RestartPolicy


class EnvCrashed(RuntimeError):
    """An env that took its runner's process down ``max_env_runner_crashes`` times within
    ``env_runner_crash_window`` env steps (a segfault, an abort, ``max_runner_memory_mb``):
    restarting it again would only crash again, so the run stops, in one line."""


def restart_policy(cfg: AlgorithmConfig, name: str = "runner") -> RestartPolicy:
    """How an actor whose process died is started again, by the policy its role names
    (``topology.RESTARTS``): "runner" (env and evaluation runners: restarts, deaths within
    a window of its env steps, memory limit), "helper" (aggregators: restarted as runners
    are), "shard" (replay shards: restarted empty, also when runners are not), "inference"
    (the central inference actor: the runners wait for it, so it comes back), "never"
    (learners: their optimizer state exists nowhere else)."""
    restarts = cfg.max_num_env_runner_restarts if cfg.restart_failed_env_runners else 0
    if name == "runner":
        return RestartPolicy(
            max_restarts=restarts, max_crashes=cfg.max_env_runner_crashes,
            crash_window=cfg.env_runner_crash_window, work_key=RUNNER_WORK,
            max_memory_mb=float(cfg.max_runner_memory_mb or 0.0),
            memory_limit_name="max_runner_memory_mb")
    counts = {"never": 0, "helper": restarts, "shard": cfg.max_num_env_runner_restarts,
              "inference": max(restarts, 1000)}
    if name not in counts:
        raise ValueError(f"restart policy {name!r}: one of runner, {', '.join(counts)}")
    return RestartPolicy(max_restarts=counts[name])


def env_name(cfg: AlgorithmConfig) -> str:
    env = cfg.env
    return env if isinstance(env, str) else getattr(env, "__name__", type(env).__name__)


def crash_message(cfg: AlgorithmConfig, event: Any) -> str:
    """The line of a runner given up for its deaths (a ``gave_up`` event with cause
    ``crashes``): the env, how often in how many steps, how it died, where its output is."""
    facts = event.facts
    memory = all(c.startswith("memory") for c in facts["causes"])
    what = (f"env {env_name(cfg)!r}: its runner {event.name} went over max_runner_memory_mb"
            if memory else f"env {env_name(cfg)!r} crashed its runner {event.name}")
    times = "once" if facts["deaths"] == 1 else f"{facts['deaths']} times"
    return (f"{what} {times} in {facts['work']:,} env steps "
            f"({'; '.join(facts['causes'])}), so the run stops (max_env_runner_crashes="
            f"{cfg.max_env_runner_crashes} within env_runner_crash_window="
            f"{cfg.env_runner_crash_window:,}); its output: {facts['log']}")
