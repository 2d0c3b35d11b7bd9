"""The parameter server: the newest policy weights and their version number.

Learners publish after each update; env runners ask with the version they hold and get
weights back only when a newer one exists, so an unchanged policy costs one small reply.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlmesh.runtime import Actor


class ParamServer(Actor):
    """Holds ``(version, weights)``; weights are ``{parameter name: numpy array}``."""

    def __init__(self) -> None:
        self._version = 0
        self._weights: dict[str, np.ndarray] | None = None
        self.fetches = 0  # replies that carried weights

    def set_weights(self, version: int, weights: dict[str, Any]) -> None:
        if version <= self._version and self._weights is not None:
            raise ValueError(f"weights version {version} is not newer than {self._version}")
        # Arrays decoded from the wire are views of the receive buffer: keeping them keeps
        # that buffer, which is what we want (one message's memory, no copy).
        self._weights = dict(weights)
        self._version = version

    def get_weights(self, have_version: int) -> list[Any] | None:
        """``[version, weights]`` if newer than ``have_version``, else None."""
        if self._weights is None or have_version >= self._version:
            return None
        self.fetches += 1
        return [self._version, self._weights]

    def version(self) -> int:
        return self._version

    def stats(self) -> dict[str, int]:
        return {"version": self._version, "fetches": self.fetches}
