"""The parameter server: the newest weights of each policy, by policy id, with the version
they were published under.

Learners publish after updates; env runners ask with the versions they hold and get weights
back only for policies with a newer one, so unchanged policies cost one small reply. The
version before the newest is kept too: a batch sampled ahead (``sample_async``) asks for
weights no newer than the driver's version when it started, and gets them even if the
driver published the next update before the runner asked.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlmesh.runtime import Actor


class ParamServer(Actor):
    """Holds ``{policy_id: (version, weights)}``; weights are ``{name: numpy array}``."""

    def __init__(self) -> None:
        self._weights: dict[str, tuple[int, dict[str, np.ndarray]]] = {}
        self._previous: dict[str, tuple[int, dict[str, np.ndarray]]] = {}
        self.fetches = 0  # replies that carried weights

    def set_weights(self, version: int, weights: dict[str, dict[str, Any]]) -> None:
        """Publish ``{policy_id: weights}`` as ``version``, which must be newer than each
        policy's current one."""
        for pid in weights:
            current = self._weights.get(pid, (0, None))[0]
            if version <= current:
                raise ValueError(f"weights version {version} of {pid!r} is not newer than {current}")
        # Arrays decoded from the wire are views of the receive buffer: keeping them keeps
        # that buffer, which is what we want (one message's memory, no copy).
        for pid, w in weights.items():
            if pid in self._weights:
                self._previous[pid] = self._weights[pid]
            self._weights[pid] = (version, dict(w))

    def get_weights(self, have: dict[str, int], up_to: int | None = None) -> dict[str, list[Any]]:
        """``{policy_id: [version, weights]}`` for each policy of ``have`` (policy id ->
        version held) whose published version is newer; {} when none is. With ``up_to``,
        the newest version not above it (of the two kept), if that is newer than held."""
        out = {}
        for pid, held in have.items():
            entry = self._weights.get(pid)
            if entry is not None and up_to is not None and entry[0] > up_to:
                entry = self._previous.get(pid)
                if entry is not None and entry[0] > up_to:
                    entry = None
            if entry is not None and entry[0] > held:
                out[pid] = [entry[0], entry[1]]
        if out:
            self.fetches += 1
        return out

    def remove_policy(self, policy_id: str) -> None:
        """Forget a policy removed from the run."""
        self._weights.pop(policy_id, None)
        self._previous.pop(policy_id, None)

    def version(self, policy_id: str | None = None) -> int:
        """The newest version of ``policy_id`` (of any policy when None); 0 before any."""
        if policy_id is not None:
            return self._weights.get(policy_id, (0, None))[0]
        return max((v for v, _ in self._weights.values()), default=0)

    def stats(self) -> dict[str, Any]:
        return {"version": self.version(), "fetches": self.fetches,
                "versions": {pid: v for pid, (v, _) in self._weights.items()}}
