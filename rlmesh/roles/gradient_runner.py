"""A3C's call on an env runner: sample a fragment and compute its loss's gradients here, on
the runner's own copy of the policy (``algorithms/a3c.py``, ``execution/rollout_ops.py``'s
``AsyncGradients``). A mixin, so the generic runner's module carries no A3C code."""

from __future__ import annotations

from typing import Any, Protocol

from rlmesh.rl.columns import merge_fragments


class _Sampling(Protocol):
    """What the mixin needs of its runner (``EnvRunner``)."""

    policy_id: str

    @property
    def policy(self) -> Any: ...

    async def _refresh_weights(self, up_to: int | None = None) -> None: ...

    async def _sample_now(self, explore: bool | None = None) -> dict[str, Any]: ...


class GradientRunner:
    """Mixed into ``EnvRunner``, whose protocol declares ``sample_and_compute_gradients``:
    every runner serves it (an execution plan's ``AsyncGradients`` may ask any algorithm's
    runners), so A3C spawns the plain runner."""

    async def sample_and_compute_gradients(self: _Sampling) -> dict[str, Any]:
        """A fragment sampled with the current weights and the gradients of its loss on
        this runner's (torch) policy; the episodes and env steps come along."""
        await self._refresh_weights()
        fragment = await self._sample_now()
        grads, stats = self.policy.compute_gradients(merge_fragments([fragment]))
        return {"gradients": grads, "stats": stats, "episodes": fragment["episodes"],
                "env_steps": fragment["env_steps"], "policy_version": fragment["policy_version"],
                "policy_id": self.policy_id}
