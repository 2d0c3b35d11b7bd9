"""The policies an env runner or policy server acts with, by policy id, and how they stay
current: built from the specs' plain data (the class a policy names for runners: the numpy
fast path for the default model, so the process never imports torch), weights pulled from
the param server by version."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from rlmesh.policy.policy import Policy
from rlmesh.policy.spec import build_policy_from_data
from rlmesh.rl.columns import DEFAULT_POLICY_ID


def make_runner_policies(policy_specs: dict[str, dict[str, Any]], config: Any, seed: int | None,
                         own_process: bool) -> dict[str, Policy]:
    """One acting copy per policy id, each seeded (``seed`` + its position)."""
    policies = {}
    for i, (pid, spec) in enumerate(policy_specs.items()):
        policy = build_policy_from_data(spec, config, runner=True)
        if "torch" in sys.modules and own_process:  # leave the driver's torch settings alone
            sys.modules["torch"].set_num_threads(1)
        if seed is not None and (own_process or "torch" not in type(policy).__module__):
            policy.seed(seed + i)
        policies[pid] = policy
    return policies


class VersionedPolicies:
    """A runner's policies and the version of each, refreshed from the param server named
    ``self._ps_name`` when it has newer ones (EnvRunner and PolicyServerRunner)."""

    policies: dict[str, Policy]
    versions: dict[str, int]
    job: Any
    _ps_name: str | None
    _ps: Any
    _stats: dict[str, Any]

    @property
    def policy(self) -> Policy:
        """The policy of a single-agent runner (``default_policy``, or the only one)."""
        return self.policies.get(DEFAULT_POLICY_ID) or next(iter(self.policies.values()))

    @property
    def version(self) -> int:
        """The oldest version among this runner's policies (-1: none loaded yet)."""
        return min(self.versions.values(), default=-1)

    async def _pull_weights(self, up_to: int | None = None) -> None:
        """Newer weights from the param server, if there are any. With ``up_to`` (a batch
        sampled ahead, ``sample_async``): none while this runner holds that version
        already, so the batch acts with the weights the driver meant whether or not the
        update it overlaps was published meanwhile (a seeded run repeats)."""
        if self._ps_name is not None and (up_to is None or self.version < up_to):
            self._take_weights(await self._fetch_weights(up_to))

    async def _fetch_weights(self, up_to: int | None = None) -> dict[str, list[Any]]:
        """``{policy_id: [version, weights]}`` of the policies with newer weights (none
        newer than ``up_to``, when given)."""
        if self._ps is None:
            self._ps = await self.job.get_actor(self._ps_name)
        return await self._ps.get_weights(self._wanted_versions(), up_to)

    def _wanted_versions(self) -> dict[str, int]:
        """The policies to ask newer weights of, with the versions held: all of them."""
        return dict(self.versions)

    def _take_weights(self, got: dict[str, list[Any]] | None) -> None:
        for pid, (version, weights) in (got or {}).items():
            if pid in self.policies and version > self.versions[pid]:
                self.set_weights(version, weights, pid)

    def set_weights(self, version: int, weights: dict[str, Any],
                    policy_id: str = DEFAULT_POLICY_ID) -> None:
        """Load ``{name: array}`` into policy ``policy_id`` as its version ``version``."""
        if policy_id not in self.policies:
            raise KeyError(f"this runner has no policy {policy_id!r} (it has {sorted(self.policies)})")
        self.policies[policy_id].set_weights(weights)
        self.versions[policy_id] = version
        self._stats["num_weight_updates"] += 1

    def get_weights(self, policy_id: str = DEFAULT_POLICY_ID) -> dict[str, np.ndarray]:
        """The weights policy ``policy_id`` acts with here (the default model's: only the
        policy trunk and head)."""
        return self.policies[policy_id].get_weights()
