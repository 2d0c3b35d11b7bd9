"""The aggregator: takes the fragments of its share of the env runners, joins them into train
batches and feeds the learners, so many runners fan into few learners (tree aggregation).

Backpressure end to end: a batch goes to a learner only on that learner's stream credit,
at most ``MAX_READY`` joined batches wait here, and runners' fragments are taken in (their
credit returned) only while there is room.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from typing import Any

from rlmesh.roles.specs import AggregatorSpec
from rlmesh.roles.learner_input import BatchBuilder, batch_size_per_learner
from rlmesh.runtime import Actor, ActorUnavailable, RemoteError
from rlmesh.runtime.protocol import Protocol

log = logging.getLogger(__name__)

MAX_READY = 2  # joined batches waiting for a learner's credit
LEARNER_WINDOW = 2  # batches in flight to each learner


class Aggregator(Actor):
    """Builds train batches for the learners named ``learners``, round robin."""

    protocol = Protocol(streams=("add_fragment",), calls=("stats",), test_hooks=("pid",))

    def __init__(self, spec: dict[str, Any]) -> None:
        own = AggregatorSpec.from_data(spec)
        cfg = own.settings()
        self.index = own.index
        self.learner_names = list(own.learners)
        self.builder = BatchBuilder(batch_size_per_learner(cfg))
        self.ready: asyncio.Queue[dict[str, Any]] = asyncio.Queue(MAX_READY)
        # batch_bytes: the arrays of the batches sent (a batch's own size, beside the bytes
        # it took on the wire: stats' bytes_sent).
        self.counters = {"num_fragments": 0, "num_env_steps": 0, "num_batches": 0,
                         "num_batches_lost": 0, "batch_bytes": 0}

    async def on_start(self) -> None:
        handles = [await self.job.get_actor(n) for n in self.learner_names]
        self._streams = [h.stream("add_batch", LEARNER_WINDOW) for h in handles]
        self._forwarder = asyncio.ensure_future(self._forward())

    async def on_stop(self) -> None:
        self._forwarder.cancel()

    async def add_fragment(self, fragment: dict[str, Any]) -> None:
        """A runner's fragment (stream item); waits while MAX_READY batches are unsent."""
        batch = self.builder.add(fragment)  # junk: a ValueError back to its sender, counted
        self.counters["num_fragments"] += 1
        self.counters["num_env_steps"] += int(fragment["env_steps"])
        if batch is not None:
            await self.ready.put(batch)

    async def _forward(self) -> None:
        for stream in itertools.cycle(self._streams):
            batch = await self.ready.get()
            try:
                await stream.send(batch)
                self.counters["num_batches"] += 1
                self.counters["batch_bytes"] += _nbytes(batch)
            except (ActorUnavailable, RemoteError) as exc:
                # A learner that died stops the run (the driver's business); keep serving.
                self.counters["num_batches_lost"] += 1
                log.warning("aggregator %d: a batch for %s was lost: %s", self.index,
                            stream.handle.name, str(exc).splitlines()[0])

    def stats(self) -> dict[str, Any]:
        """Counters since start, and what waits here now."""
        lost = self.builder.counters
        return {**self.counters, "num_batches_lost": self.counters["num_batches_lost"]
                + lost["num_batches_lost"], "num_fragments_lost": lost["num_fragments_lost"],
                "ready_batches": self.ready.qsize(),
                "in_flight": sum(s.in_flight for s in self._streams),
                "bytes_sent": sum(s.bytes_sent for s in self._streams),
                "pending_env_steps": self.builder.pending_steps, "index": self.index}

    def pid(self) -> int:
        return os.getpid()


def _nbytes(value: Any) -> int:
    """Bytes of the arrays in ``value`` (nested dicts and lists of them)."""
    if isinstance(value, dict):
        return sum(_nbytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    return int(getattr(value, "nbytes", 0))
