"""Actors for the bad-input and fuzz integration tests: small, side-effect free methods."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from rlmesh.runtime import Actor


class EchoActor(Actor):
    """Answers with what it was sent; nothing a fuzzed message reaches can hurt it."""

    def __init__(self) -> None:
        self.calls = 0

    def echo(self, x: Any) -> Any:
        self.calls += 1
        return x

    async def aecho(self, x: Any) -> Any:
        self.calls += 1
        return x

    def add(self, a: Any, b: Any) -> Any:
        return a + b  # TypeError for "x" + 1: the caller gets it back as an error reply

    def pid(self) -> int:
        return os.getpid()

    def count(self) -> int:
        return self.calls

    def unsendable(self) -> Any:
        """A result the codec cannot send: a numpy complex scalar (complex is not msgpack)."""
        return np.complex128(1 + 2j)
