"""The meshes of asynchronous runs, on ``Mesh``'s facade: ``AsyncMesh`` (IMPALA, APPO: runners
stream to aggregators or learners, which train on their own) and ``ApexMesh`` (APEX: runners
stream to replay shards, which feed the learner actor)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from rlmesh.config.base import AlgorithmConfig
from rlmesh.driver.mesh import AGGREGATOR, REPLAY_SHARD, Mesh
from rlmesh.policy.policy import class_path
from rlmesh.runtime import ActorUnavailable, RestartPolicy

log = logging.getLogger(__name__)


class AsyncMesh(Mesh):
    """The processes of an asynchronous run (IMPALA, APPO): env runners stream fragments
    to aggregators (``num_aggregation_workers``) or straight to the learners, which train
    on their own and publish weights to the param server.

    ``max(1, num_learners)`` learners (in the driver process when ``num_learners`` is 0),
    data-parallel when more than one. A runner or aggregator that dies is restarted and
    the streams into it are started afresh; a learner that dies ends the run
    (``learner_failure``), as its optimizer state exists nowhere else.
    """

    asynchronous = True

    def __init__(self, config: AlgorithmConfig, policy_specs: dict[str, Any]) -> None:
        super().__init__(config, policy_specs)
        self.aggregators: list[Any] = []
        self.aggregator_restarts = 0

    def start_aggregators(self) -> None:
        self.run(self._start_aggregators())

    def start_async(self) -> None:
        """The learners' update loops, then the runners' streams into them."""
        self.run(self._start_async())

    def pop_sampled(self) -> list[dict[str, Any]]:
        """Episodes and env steps of every reachable runner since the last call."""
        return self.run(self._pop_sampled())

    def learner_metrics(self) -> list[dict[str, Any]]:
        """Each learner's metrics since the last call, by rank."""
        return self.run(self._learner_metrics())

    def num_updates(self) -> int:
        return self.run(self.learners[0].call("num_updates", timeout=60))

    def aggregator_stats(self) -> list[dict[str, Any]]:
        """Each reachable aggregator's counters (a restarting one is left out)."""
        return self.run(self._aggregator_stats())

    async def _start_aggregators(self) -> None:
        cfg = self.config
        names = [h.name for h in self.learners]
        policy = RestartPolicy(max_restarts=cfg.max_num_env_runner_restarts
                               if cfg.restart_failed_env_runners else 0)
        self.aggregators = list(await asyncio.gather(*(
            self.job.spawn(AGGREGATOR, config=cfg.to_dict(), config_cls=class_path(type(cfg)),
                           learners=names, index=j, name=f"aggregator-{j}",
                           role="Aggregator", restart=policy)
            for j in range(cfg.num_aggregation_workers))))

    def sinks_of(self, runner_index: int) -> list[str]:
        """Where runner ``runner_index`` (0-based position) ships: its aggregator, or every
        learner in turn (so data-parallel learners get equal shares)."""
        if self.aggregators:
            return [self.aggregators[runner_index % len(self.aggregators)].name]
        return [h.name for h in self.learners]

    async def _start_async(self) -> None:
        await asyncio.gather(*(h.call("start_async") for h in self.learners))
        window = self.config.max_sample_requests_in_flight_per_worker
        await asyncio.gather(*(r.call("start_streaming", self.sinks_of(i), window)
                               for i, r in enumerate(self.runners)))

    async def _publish(self, weights: dict[str, Any] | None = None,
                       policies: list[str] | None = None) -> int:
        """The learners' weights to the param server now (rank 0 publishes, in its own
        count of versions)."""
        self.version = await self.learners[0].call("publish")
        return self.version

    def _on_event(self, event: Any) -> None:
        super()._on_event(event)
        name = event.name
        if event.kind != "restarted":
            return
        loop = asyncio.get_running_loop()
        if name.startswith("env_runner-"):
            index = [r.name for r in self.runners].index(name)
            loop.create_task(self._restream(self.runners[index], index))
        elif name.startswith("aggregator-"):
            self.aggregator_restarts += 1
            index = [a.name for a in self.aggregators].index(name)
            feeders = [r for i, r in enumerate(self.runners)
                       if self.sinks_of(i) == [self.aggregators[index].name]]
            for r in feeders:
                loop.create_task(self._tell(r, "reset_streams", f"{name} restarted"))

    async def _restream(self, runner: Any, index: int) -> None:
        try:
            await runner.call("start_streaming", self.sinks_of(index),
                              self.config.max_sample_requests_in_flight_per_worker)
        except Exception as exc:
            log.warning("could not restart streaming on %s: %s", runner.name, exc)

    async def _tell(self, actor: Any, method: str, *args: Any) -> None:
        try:
            await actor.call(method, *args, timeout=10)
        except Exception as exc:
            log.warning("%s.%s failed: %s", actor.name, method, exc)

    async def _pop_sampled(self) -> list[dict[str, Any]]:
        runners = self.healthy_runners()
        got = await asyncio.gather(*(r.call("pop_sampled", timeout=10) for r in runners),
                                   return_exceptions=True)
        out = []
        for runner, g in zip(runners, got):
            if isinstance(g, ActorUnavailable):
                continue  # restarting: its episodes come next time, or died with it
            if isinstance(g, BaseException):
                raise g
            self.totals.add(runner.name, {"num_fragments_lost": g["num_fragments_lost"]})
            self.env_errors(runner.name, g)
            g["runner"] = runner.name
            out.append(g)
        return out

    async def _learner_metrics(self) -> list[dict[str, Any]]:
        got = list(await asyncio.gather(*(h.call("pop_metrics", timeout=60) for h in self.learners)))
        for h, m in zip(self.learners, got):  # fragments streamed straight to a learner
            self.totals.add(h.name, {"num_fragments_lost": m.get("num_fragments_lost", 0)})
        return got

    async def _aggregator_stats(self) -> list[dict[str, Any]]:
        got = await asyncio.gather(*(a.call("stats", timeout=10) for a in self.aggregators),
                                   return_exceptions=True)
        out = [g for g in got if isinstance(g, dict)]
        for a, g in zip(self.aggregators, got):
            if isinstance(g, dict):
                self.totals.add(a.name, {k: g.get(k, 0) for k in
                                         ("num_batches_lost", "num_fragments_lost")})
        return out


class ApexMesh(AsyncMesh):
    """The processes of an APEX run: runners stream fragments to ``num_replay_buffer_shards``
    replay shards (runner i to shard i mod shards, so each runner's n-step windows stay in
    one shard); the learner actor (in the driver's process with ``num_learners`` 0, as
    IMPALA's) samples the shards on credits and sends each batch's TD errors back to its
    shard (``roles/replay_input.py``). A shard that dies is restarted empty, its runners
    start new streams into it and the learners are told. With one shard, it is served from
    the driver's process (RLlib's local buffer): no process, and ``local_shard`` is its
    ``ShardBuffer``, which a learner in the driver samples without a socket."""

    #: One shard in the driver's process; False keeps it in a process of its own (the
    #: benchmark's reference: tests/benchmarks/bench_apex.py apex_local_shard).
    local_single_shard = True

    def __init__(self, config: AlgorithmConfig, policy_specs: dict[str, Any]) -> None:
        super().__init__(config, policy_specs)
        self.shards: list[Any] = []
        self.shard_restarts = 0
        self.local_shard: Any = None

    # --- the facade (apex.py) ---

    def start_replay_learning(self, obs_space: Any, action_space: Any) -> None:
        """The replay shards (spaces as data), the learners' update loops fed by them, then
        the runners' streams into the shards."""
        self.run(self._start_replay_learning(obs_space, action_space))

    def shard_stats(self) -> list[dict[str, Any]]:
        """Each reachable shard's counters (a restarting one is left out)."""
        if self.local_shard is not None:
            return [self.local_shard.stats()]
        return self.run(self._shard_stats())

    def shard_names(self) -> list[str]:
        return [s.name for s in self.shards]

    # --- on the loop ---

    async def _start_replay_learning(self, obs_space: Any, action_space: Any) -> None:
        await self._start_shards(obs_space, action_space)
        names = self.shard_names()
        await asyncio.gather(*(h.call("start_replay", names) for h in self.learners))
        await self._start_async()

    async def _start_shards(self, obs_space: Any, action_space: Any) -> None:
        cfg = self.config
        if cfg.num_replay_buffer_shards == 1 and self.local_single_shard:
            self.shards = [await self.job.spawn(
                REPLAY_SHARD, config=cfg.to_dict(), config_cls=class_path(type(cfg)),
                obs_space=obs_space, action_space=action_space, index=0,
                name="replay_shard-0", in_process=True)]
            self.local_shard = self.job.local_actor("replay_shard-0").core
            return
        policy = RestartPolicy(max_restarts=cfg.max_num_env_runner_restarts)
        self.shards = list(await asyncio.gather(*(
            self.job.spawn(REPLAY_SHARD, config=cfg.to_dict(), config_cls=class_path(type(cfg)),
                           obs_space=obs_space, action_space=action_space, index=j,
                           name=f"replay_shard-{j}", role="ReplayShard",
                           restart=policy)
            for j in range(cfg.num_replay_buffer_shards))))

    def sinks_of(self, runner_index: int) -> list[str]:
        return [self.shards[runner_index % len(self.shards)].name]

    async def _start_async(self) -> None:
        window = self.config.max_sample_requests_in_flight_per_worker
        await asyncio.gather(*(r.call("start_streaming", self.sinks_of(i), window)
                               for i, r in enumerate(self.runners)))

    def _on_event(self, event: Any) -> None:
        super()._on_event(event)
        if event.kind == "restarted" and event.name.startswith("replay_shard-"):
            self.shard_restarts += 1
            loop = asyncio.get_running_loop()
            for i, r in enumerate(self.runners):
                if self.sinks_of(i) == [event.name]:
                    loop.create_task(self._tell(r, "reset_streams", f"{event.name} restarted"))
            # Sample requests it will never answer, and priorities for its former life.
            index = self.shard_names().index(event.name)
            for h in self.learners:
                loop.create_task(self._tell(h, "replay_shard_restarted", index))

    async def _shard_stats(self) -> list[dict[str, Any]]:
        got = await asyncio.gather(*(s.call("stats", timeout=10) for s in self.shards),
                                   return_exceptions=True)
        return [g for g in got if isinstance(g, dict)]
