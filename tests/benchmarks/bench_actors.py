"""Actor classes the benchmarks spawn; importable by module path so child processes find them."""

from __future__ import annotations

from typing import Any

from rlmesh.runtime import Actor


class EchoActor(Actor):
    """Returns what it is given: the request/reply round-trip benchmark."""

    def echo(self, payload: Any) -> Any:
        return payload


class QuietEchoActor(EchoActor):
    """The echo actor with the poll for its next request turned off (``spin_wait_us = 0``;
    an actor polls 300 µs after answering a call by default)."""

    spin_wait_us = 0


class ConsumeActor(Actor):
    """Counts the bytes of streamed arrays without touching their contents."""

    def __init__(self) -> None:
        self.nbytes = 0
        self.items = 0

    def consume(self, arr: Any) -> None:
        self.nbytes += arr.nbytes
        self.items += 1

    def totals(self) -> list[int]:
        return [self.items, self.nbytes]


class EmptyActor(Actor):
    """Does nothing: the cold-start benchmark measures only the process and runtime."""

    def ping(self) -> None:
        return None
