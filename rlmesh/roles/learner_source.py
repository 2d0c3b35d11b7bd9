"""Where a learner actor's batches come from: the contract every source keeps, and the direct
source. The others: a stream (``learner_input.StreamSource``: IMPALA, APPO) and replay shards
(``replay_input.ReplaySource``: APEX); the actor builds the one its run needs."""

from __future__ import annotations

from typing import Any, Protocol

POLL_S = 0.5  # the update thread's longest wait before it looks at the stop flag again


class InputClosed(Exception):
    """The learner is stopping: no more batches."""


class LearnerSource(Protocol):
    """A learner's input. A source that feeds an update loop (the learner's own thread)
    answers ``next`` until the learner stops (then raises ``InputClosed``); the calls only
    one source serves (``add_fragment``, ``replay_shard_restarted``) are methods of that
    source named as the wire call, which the actor forwards (``LearnerActor._source_call``)."""

    #: What the learner's errors call this input ("direct", "stream", "replay").
    name: str

    def next(self, version: int, timeout: float) -> tuple[dict[str, Any], bool]:
        """The next train batch and whether its env steps are new (``LearnerInput.next``'s
        contract); ``version``: the learner's policy version now."""
        ...

    def timesteps(self) -> int:
        """The env steps sampled so far, near enough: the clock of the learner's schedules."""
        ...

    def trained(self, batch: dict[str, Any], stats: dict[str, dict[str, Any]]) -> None:
        """``batch`` was trained on, with ``stats`` (by policy id): what the source sends back
        (it may take its own statistics out of ``stats`` before they are reported)."""
        ...

    def metrics(self) -> dict[str, Any]:
        """The input's counters, for ``pop_metrics``."""
        ...

    def stop(self) -> None:
        """The learner stops (on its event loop)."""
        ...


class DirectSource:
    """Direct batches (PPO, A2C; A3C's gradients): the driver's ``update`` and
    ``apply_gradients`` calls bring them, and those calls run the update. A learner holds
    this source until ``start_async`` or ``start_replay`` gives it one that feeds an update
    loop; it has no loop to feed, no counters, and serves no source's call."""

    name = "direct"

    def next(self, version: int, timeout: float) -> tuple[dict[str, Any], bool]:
        raise RuntimeError("direct batches come with the driver's update calls: "
                           "no update loop takes them")

    def timesteps(self) -> int:
        return 0  # the driver's update calls name theirs

    def trained(self, batch: dict[str, Any], stats: dict[str, dict[str, Any]]) -> None:
        pass

    def metrics(self) -> dict[str, Any]:
        return {}

    def stop(self) -> None:
        pass
