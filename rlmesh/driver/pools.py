"""The mesh's pools: ``Pool``, the actors of one role kind (iterable over their handles), and
besides the runners' (runner_pool.py) the learner actors (update, a call on each or on rank
0, weights published), the param server (weights the driver holds), the evaluation runners
(evaluate) and the stream helpers (aggregators, replay shards: their counters). Each is
called from the driver's thread."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Iterator, Sequence

from rlmesh.driver.on_loop import blocking, started
from rlmesh.runtime import ActorUnavailable

log = logging.getLogger(__name__)

# beyond evaluation_sample_timeout_s: an evaluation runner stuck inside one env step
EVAL_CALL_MARGIN_S = 30.0


class Pool:
    """The actors of role ``kind`` in ``mesh``'s run, in index order (none before they are
    built): iterating, indexing and ``len`` see their handles."""

    kind = ""

    def __init__(self, mesh: Any, kind: str | None = None) -> None:
        self.mesh, self.loop = mesh, mesh.loop_thread
        self.kind = kind or self.kind

    @property
    def handles(self) -> list[Any]:
        return self.mesh.handles(self.kind)

    def names(self) -> list[str]:
        """Each actor's name (``<stem>-<index>``), in index order."""
        return self.mesh.names(self.kind)

    @property
    def restarts(self) -> int:
        """Restarts of this kind's actors since the run started."""
        return self.mesh.restarts_of[self.kind]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.handles)

    def __getitem__(self, index: int) -> Any:
        return self.handles[index]

    def __len__(self) -> int:
        return len(self.handles)


class LearnerPool(Pool):
    """The learner actors (data-parallel ranks; a learner in the driver is rank 0)."""

    kind = "learner"

    async def _on_each(self, method: str, per_rank: Sequence[tuple[Any, ...]],
                       kwargs: dict[str, Any], timeout: float | None) -> list[Any]:
        return list(await asyncio.gather(*(h.call(method, *args, **kwargs, timeout=timeout)
                                           for h, args in zip(self.handles, per_rank))))

    @started
    async def update(self, per_rank: list[tuple[Any, ...]], kwargs: dict[str, Any]) -> list[Any]:
        """``update(*per_rank[r], **kwargs)`` on every learner rank ``r``, started now: the
        future of their replies by rank (an update has no timeout: it takes what it takes)."""
        return await self._on_each("update", per_rank, kwargs, None)

    @blocking
    async def foreach(self, method: str, *args: Any, timeout: float | None = 60,
                      **kwargs: Any) -> list[Any]:
        """``method(*args, **kwargs)`` on every learner actor; the replies by rank."""
        return await self._on_each(method, [args] * len(self.handles), kwargs, timeout)

    @blocking
    async def on_rank0(self, method: str, *args: Any, timeout: float | None = 60) -> Any:
        """``method(*args)`` on learner 0 (every rank holds the same weights and state)."""
        return await self.handles[0].call(method, *args, timeout=timeout)

    @blocking
    async def publish(self, policies: list[str] | None = None) -> int:
        """Learner rank 0 sends its weights (of ``policies``, default all) straight to the
        param server, which pushes them to its subscribers; only the version comes back."""
        mesh = self.mesh
        if mesh.asynchronous:  # learners with versions of their own: rank 0's count
            mesh.version = await self.handles[0].call("publish")
            return mesh.version
        version = mesh.next_version()
        await self.handles[0].call("publish", version, policies, timeout=120)
        return version

    @blocking
    async def metrics(self) -> list[dict[str, Any]]:
        """Each learner's metrics since the last call, by rank (fragments streamed straight
        to a learner and lost count toward the run's totals)."""
        got = await self._on_each("pop_metrics", [()] * len(self.handles), {}, 60)
        for h, m in zip(self.handles, got):
            self.mesh.totals.add(h.name, {"num_fragments_lost": m.get("num_fragments_lost", 0)})
        return got


class ParamServerPool(Pool):
    """The param server (one, in the driver's process): the weights the driver publishes
    itself (a learner in this process), read back and forgotten here."""

    kind = "param_server"

    @blocking
    async def publish(self, weights: dict[str, dict[str, Any]]) -> int:
        """``weights`` (``{policy_id: weights}``, a learner's in this process) under a new
        version, which the param server pushes to its subscribers; the version."""
        mesh = self.mesh
        version = mesh.next_version()
        mesh.weights_bytes_published += sum(
            int(getattr(a, "nbytes", 0)) for w in weights.values() for a in w.values())
        await self.handles[0].call("set_weights", version, weights)
        return version

    @blocking
    async def remove_policy(self, policy_id: str) -> None:
        """The param server forgets ``policy_id`` (a policy removed while training)."""
        await self.handles[0].call("remove_policy", policy_id)

    def latest(self, policy_id: str) -> tuple[int, dict[str, Any]] | None:
        """The newest ``(version, weights)`` of ``policy_id`` (None before any), read in this
        process: no socket, no copy (the driver's own policy copies)."""
        if self.mesh.job is None or not self.handles:
            return None
        return self.mesh.job.local_actor(self.handles[0].name).latest(policy_id)


class EvalPool(Pool):
    """The evaluation runners, built on first use."""

    kind = "eval_runner"

    @started
    async def evaluate(self, version: int, weights: dict[str, Any], filter_state: Any,
                       amounts: list[int], stems: list[str | None],
                       connector_state: dict[str, Any] | None = None
                       ) -> tuple[list[dict[str, Any]], float]:
        """Started now: each evaluation runner takes ``weights`` (under ``version``) and
        the filter states (the env-to-module connectors' too), then evaluates its amount (``amounts``, in runner order; 0: it
        sits this one out), its videos named from its stem. The future's result: the
        replies of the runners that answered, and the seconds it took."""
        start = time.perf_counter()
        calls = [self._evaluate_on(r, version, weights, filter_state, amount, stem,
                                   connector_state)
                 for r, amount, stem in zip(self.handles, amounts, stems) if amount]
        got = [g for g in await asyncio.gather(*calls) if g is not None]
        return got, time.perf_counter() - start

    async def _evaluate_on(self, runner: Any, version: int, weights: dict[str, Any],
                           filter_state: Any, amount: int, stem: str | None,
                           connector_state: dict[str, Any] | None = None
                           ) -> dict[str, Any] | None:
        cfg = self.mesh.config
        try:
            for pid, w in weights.items():
                await runner.call("set_weights", version, w, pid)
            if cfg.observation_filter != "NoFilter":
                await runner.call("set_filter_state", filter_state)
            if connector_state:  # MeanStdFilter connectors: the training runners' statistics
                await runner.call("set_connector_filter_state", connector_state)
            return await runner.call("evaluate", cfg.evaluation_duration_unit, amount,
                                     cfg.evaluation_sample_timeout_s, stem,
                                     timeout=cfg.evaluation_sample_timeout_s + EVAL_CALL_MARGIN_S)
        except ActorUnavailable as exc:  # restarted for the next evaluation; this one goes on
            if not cfg.restart_failed_env_runners:
                raise RuntimeError(f"evaluation runner {runner.name} failed: {exc}") from None
            log.warning("evaluation runner %s unavailable (%s); evaluating with the others",
                        runner.name, str(exc).splitlines()[0])
            return None


class StatsPool(Pool):
    """Actors of one kind that only report counters (aggregators, replay shards); the counters
    named in ``totals`` are summed over their restarts into the mesh's totals."""

    def __init__(self, mesh: Any, kind: str, totals: tuple[str, ...] = ()) -> None:
        super().__init__(mesh, kind)
        self.totals = totals

    @blocking
    async def stats(self) -> list[dict[str, Any]]:
        """Each reachable actor's counters (a restarting one is left out)."""
        handles = self.handles
        got = await asyncio.gather(*(a.call("stats", timeout=10) for a in handles),
                                   return_exceptions=True)
        for a, g in zip(handles, got):
            if isinstance(g, dict) and self.totals:
                self.mesh.totals.add(a.name, {k: g.get(k, 0) for k in self.totals})
        return [g for g in got if isinstance(g, dict)]

