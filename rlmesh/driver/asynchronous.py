"""The driver of asynchronous algorithms (IMPALA, APPO): the runners, aggregators and learners
run on their own once started; an iteration waits ``min_time_s_per_iteration`` (and for at
least one update), then gathers what happened into one result."""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, TypeVar

import numpy as np

from rlmesh.driver.algorithm import Algorithm
from rlmesh.driver.learner_failure import LearnerFailed, learner_failed
from rlmesh.driver.async_mesh import AsyncMesh
from rlmesh.runtime import ActorUnavailable, RemoteError

log = logging.getLogger(__name__)

T = TypeVar("T")

POLL_S = 0.02  # how often an iteration past its minimum time asks whether an update happened


class AsyncAlgorithm(Algorithm):
    """Base of IMPALA and APPO; subclasses name their config class and default policy."""

    mesh_class = AsyncMesh
    mesh: AsyncMesh
    times_its_own_iteration = True

    def _on_started(self) -> None:
        self.mesh.build("aggregators")  # Algorithm then connects: the learners' update
        # loops (their ready call), then the runners' streams

    def training_iteration(self) -> dict[str, Any]:
        """One iteration: at least ``min_time_s_per_iteration`` seconds and one update."""
        start = time.perf_counter()
        self._wait_for_update(start)
        self.sync_filters()
        learners = self._ask(self.mesh.learners.metrics)
        sampled = self._ask(self.mesh.runners.pop_sampled)
        aggregators = self._ask(self.mesh.aggregators.stats)
        steps = sum(s["env_steps"] for s in sampled)
        trained = sum(m["num_env_steps_trained"] for m in learners)
        episodes = [{"episodes": s["episodes"],
                     "num_nonfinite_steps_skipped": s.get("num_nonfinite_steps_skipped", 0),
                     "num_episodes_unlisted": s.get("num_episodes_unlisted", 0),
                     **({"agent_steps": s["agent_steps"]} if "agent_steps" in s else {}),
                     **({"runner_metrics": s["runner_metrics"]} if "runner_metrics" in s else {})}
                    for s in sampled]
        result = self._finish_iteration(start, episodes, steps, trained, _mean_stats(learners))
        result.update(self._pipeline_metrics(learners, sampled, aggregators))
        return result

    def _wait_for_update(self, start: float) -> None:
        cfg = self.config
        time.sleep(cfg.min_time_s_per_iteration or 0)
        while True:
            # An update whose statistics the metrics below will read (not only its gradient
            # step: under load the iteration could otherwise report nothing trained).
            if self._ask(self.mesh.learners.on_rank0, "updates_reported") > 0:
                return
            if time.perf_counter() - start > cfg.learner_queue_timeout + 30:
                raise LearnerFailed(f"no update in {cfg.learner_queue_timeout + 30:.0f} s")
            time.sleep(POLL_S)

    def _ask(self, call: Callable[..., T], *args: Any) -> T:
        """``call(*args)``, one of the mesh's pools'; a learner's death or failure becomes
        LearnerFailed."""
        try:
            if self.mesh.learner_failure is not None:
                raise ActorUnavailable(self.mesh.learner_failure)
            self.mesh.runners.check()  # an env that kept crashing its runner: EnvCrashed
            return call(*args)
        except (ActorUnavailable, RemoteError) as exc:
            if self.mesh.learner_failure is None and not isinstance(exc, RemoteError):
                raise
            raise learner_failed(self, exc) from None

    def _pipeline_metrics(self, learners: list[dict[str, Any]], sampled: list[dict[str, Any]],
                          aggregators: list[dict[str, Any]]) -> dict[str, Any]:
        lag_weights = [m["num_updates"] for m in learners]
        total = sum(lag_weights)
        return {
            "num_learner_updates": sum(m["num_updates"] for m in learners),
            "policy_lag_mean": (sum(m["policy_lag_mean"] * w for m, w in zip(learners, lag_weights))
                                / total if total else 0.0),
            "policy_lag_max": max((m["policy_lag_max"] for m in learners), default=0),
            "learner_queue_size": [m["learner_queue_size"] for m in learners],
            "learner_idle_fraction": float(np.mean([m["learner_idle_fraction"] for m in learners])),
            "num_batches_replayed": sum(m["num_batches_replayed"] for m in learners),
            "num_batches_dropped_stale": sum(m["num_batches_dropped_stale"] for m in learners),
            # Since the run started, over runner and aggregator restarts: never goes down.
            "num_fragments_lost": self.mesh.totals["num_fragments_lost"],
            "num_batches_lost": self.mesh.totals["num_batches_lost"],
            "num_aggregator_restarts": self.mesh.aggregators.restarts,
            "aggregators": aggregators,
        }


def _mean_stats(learners: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Each policy's statistics averaged over the learners that updated it in the iteration."""
    out: dict[str, dict[str, float]] = {}
    for pid in {p for m in learners for p in m["stats"]}:
        per = [m["stats"][pid] for m in learners if pid in m["stats"]]
        keys = {k for s in per for k in s}
        out[pid] = {k: float(np.mean([s[k] for s in per if k in s])) for k in keys}
    return out
