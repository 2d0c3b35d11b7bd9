"""The swarm's learner: an actor that takes the aggregators' ``add_batch`` stream exactly as a
``LearnerActor`` does (same name, same stream protocol, credit returned once the batch is
handled) and counts batches, env steps and bytes instead of training.

A real LearnerActor needs a real policy and columns a loss can use, and would measure torch's
update time; the swarm measures the control plane, so its learner does nothing with a batch
but count it (the time a real update takes is in the benchmarks of tests/benchmarks)."""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from rlmesh.runtime import Actor
from rlmesh.runtime.protocol import Protocol


def nbytes(value: Any) -> int:
    """Bytes of the arrays in ``value`` (nested dicts and lists)."""
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, dict):
        return sum(nbytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(nbytes(v) for v in value)
    return 0


class SinkLearner(Actor):
    """Counts what the aggregators send it."""

    protocol = Protocol(streams=("add_batch",), calls=("stats", "pid"))

    def __init__(self) -> None:
        self.counts = {"batches": 0, "env_steps": 0, "bytes": 0, "fragments": 0}
        self.first = self.last = 0.0

    def add_batch(self, batch: dict[str, Any]) -> None:
        now = time.time()
        self.first = self.first or now
        self.last = now
        self.counts["batches"] += 1
        self.counts["env_steps"] += int(batch["env_steps"])
        self.counts["fragments"] += len(batch["policy_versions"])
        self.counts["bytes"] += nbytes(batch["policies"])

    def stats(self) -> dict[str, Any]:
        return {**self.counts, "first": self.first, "last": self.last}

    def pid(self) -> int:
        return os.getpid()
