"""Named actor classes for test_named_actors (importable, so actor processes find them)."""

from __future__ import annotations

import os

import numpy as np

import rlmesh
from rlmesh.runtime import Actor


class Curriculum(Actor):
    """A named actor written against the runtime's Actor base: async methods, ``self.job``,
    and reaching another named actor from its own process."""

    def __init__(self, level: int = 1) -> None:
        self.level = level

    async def promote(self) -> int:
        self.level += 1
        return self.level

    def get_level(self) -> int:
        return self.level

    def counter_started(self) -> int:
        """The counter's total, asked from this actor's process through rlmesh.get_actor."""
        return rlmesh.get_actor("counter").call("counts")["started"]


class Stats:
    """A plain class: arrays in and out, a static method, an exception that comes back."""

    def __init__(self, size: int) -> None:
        self.total = np.zeros(size, dtype=np.float32)

    def add(self, values: np.ndarray) -> np.ndarray:
        self.total += values
        return self.total

    @staticmethod
    def version() -> str:
        return "1"

    def pid(self) -> int:
        return os.getpid()

    def fail(self) -> None:
        raise ValueError("stats cannot do that")
