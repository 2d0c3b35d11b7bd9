"""The wiring of a run's processes: build a declared topology (``topologies.py``: which roles,
how many, where, who streams to whom), supervise it (react to each process's death or restart
by the role kind recorded when it was spawned) and own the event loop every remote call runs
on (``driver/loop.py``). What the driver asks of each kind of actor is that kind's pool:
``mesh.runners`` (runner_pool.py), ``mesh.learners``, ``mesh.param_server``,
``mesh.eval_runners``, ``mesh.aggregators``, ``mesh.shards`` (pools.py), called from the
driver's thread; each is iterable over its actors' handles.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
import logging
from typing import Any, Coroutine, TypeVar

from rlmesh.config.base import AlgorithmConfig
from rlmesh.config.settings import ConfigError
from rlmesh.driver.inference_choice import choose_inference
from rlmesh.driver.loop import LoopThread
from rlmesh.driver.pools import EvalPool, LearnerPool, ParamServerPool, StatsPool
from rlmesh.driver.runner_faults import crash_message, restart_policy
from rlmesh.driver.runner_pool import RunnerPool, SampleTimeout  # noqa: F401 (its home for callers)
from rlmesh.driver.topologies import ENV_RUNNER, SYNC
from rlmesh.driver.topology import Role, Topology
from rlmesh.env.registry import env_registry
from rlmesh.named_actors import start_named_actors
from rlmesh.roles.inference_actor import INFERENCE_ACTOR
from rlmesh.roles.specs import RunnerSpec
from rlmesh.runtime import handed
from rlmesh.runtime.import_path import startup_code
from rlmesh.runtime.job import Job, jobs_are_local, make_job
from rlmesh.runtime.process import prestart

log = logging.getLogger(__name__)

T = TypeVar("T")


def actor_env(cfg: AlgorithmConfig) -> dict[str, str]:
    """What the run's actor processes find in their environment: log_level reaches every
    process; their log files keep INFO at least (the lines shown when a process dies)."""
    return {"RLMESH_LOG_LEVEL": "DEBUG" if cfg.log_level == "DEBUG" else "INFO"}


def check_lambdas_can_go(cfg: AlgorithmConfig) -> None:
    """One line, before any process starts, when a launched cluster's run names a lambda or
    a local definition (runtime/handed.py): only this machine's processes can be handed
    them, through the pipe they start with; a node imports code by path. Locally, one that
    cannot be handed (it holds a lock) is the one line instead."""
    if jobs_are_local():
        handed.payload()
        return
    data = cfg.to_dict()
    registry = env_registry()
    if isinstance(cfg.env, str) and cfg.env in registry:
        data[f"the creator of env {cfg.env!r} (register_env)"] = registry[cfg.env]
    refusal = handed.remote_refusal(data)
    if refusal is not None:
        raise ConfigError(refusal)


def prestart_runners(cfg: AlgorithmConfig) -> None:
    """Start the env runners' interpreters now, before the run is built: ``rlmesh train``
    calls this before it imports torch, so their imports overlap its own (each is about a
    second); the runners the Mesh starts take them over (runtime.process.WarmProcess)."""
    if (cfg.num_env_runners < 1 or cfg.policy_server_address is not None
            or not jobs_are_local() or not _known_env(cfg.env)):
        return
    prestart(cfg.num_env_runners, actor_env(cfg), [ENV_RUNNER.partition(":")[0]])


def _known_env(env: Any) -> bool:
    """A gymnasium id or a registered name: a misspelt one fails before anything starts."""
    import gymnasium as gym

    return isinstance(env, str) and (env in gym.registry or env in env_registry())


class Totals:
    """Counters summed over processes that restart: each reports its own count since it
    started, which begins again at 0 after a restart; the totals only ever grow."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], int] = {}
        self.total: dict[str, int] = {}

    def add(self, who: str, counters: dict[str, Any]) -> None:
        for key, value in counters.items():
            value = int(value)
            last = self._last.get((who, key), 0)
            self._last[(who, key)] = value
            # Lower than last time: a new process, whose whole count is new.
            self.total[key] = self.total.get(key, 0) + (value - last if value >= last else value)

    def restarted(self, who: str) -> None:
        """``who`` is a new process: its next counts are all new (even above the old ones)."""
        for key in [k for k in self._last if k[0] == who]:
            self._last[key] = 0

    def __getitem__(self, key: str) -> int:
        return self.total.get(key, 0)


class Mesh:
    """The processes of one run, built from ``topology``; its public methods are called from
    the driver's thread, never from the loop's."""

    topology: Topology = SYNC
    runner_pool_class: type[RunnerPool] = RunnerPool  # ES runners' has rollouts (es_mesh.py)
    asynchronous = False  # learners that train on their own, fed by streams (AsyncMesh)
    #: One replay shard in the driver's process (APEX); False keeps it in a process of its
    #: own (the benchmark's reference: tests/benchmarks/bench_apex.py apex_local_shard).
    local_single_shard = True

    def __init__(self, config: AlgorithmConfig, policy_specs: dict[str, Any],
                 topology: Topology | None = None) -> None:
        self.config = config
        self.policy_specs = policy_specs
        self.topology = topology or type(self).topology
        # The run's event loop: every call to a process of the run is a coroutine on it.
        self.loop_thread = LoopThread()
        self.job: Job | None = None
        self._actors: dict[str, list[Any]] = {}  # by role kind, in index order
        self._kinds: dict[str, str] = {}  # actor name -> role kind, recorded at spawn
        self._in_driver: set[str] = set()
        self._gone: set[str] = set()  # given up on
        self._down: set[str] = set()  # died or hung, being restarted
        self.restarts_of: collections.Counter[str] = collections.Counter()  # by kind
        self.args: dict[str, Any] = {}  # what a phase was built with (spaces: replay shards)
        self._connected: list[Any] = []  # streams opened by the mesh, restarted with their ends
        self.runner_failure: str | None = None  # an env that kept crashing its runner
        self.learner_failure: str | None = None
        self.failed_learner: str | None = None  # its actor name
        self.version = 0
        # Weights this process sent the param server (a learner here); learner actors send
        # theirs straight (publish): then this stays 0.
        self.weights_bytes_published = 0
        self._messages_before: dict[str, int] = {}  # messages_sent at the last iteration's end
        self._relay_plan: list[tuple[str, list[str], str]] | None = None  # once placed
        self._relay_of: dict[str, str] = {}  # runner -> its relay, from that plan
        self.totals = Totals()
        self.inference: dict[str, Any] = {"mode": "runner"}  # where actions are computed
        self.local_shard: Any = None  # APEX's one shard in this process: its ShardBuffer
        self._runner_base: RunnerSpec | None = None
        # What the driver asks of each kind of actor: its pool.
        self.runners = self.runner_pool_class(self)
        self.learners = LearnerPool(self)
        self.param_server = ParamServerPool(self)
        self.eval_runners = EvalPool(self)
        self.aggregators = StatsPool(self, "aggregator", ("num_batches_lost", "num_fragments_lost"))
        self.shards = StatsPool(self, "replay_shard")

    # --- the loop ---

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """``coro`` run on the mesh's loop, its result (tests that call an actor directly)."""
        return self.loop_thread.run(coro, timeout)

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """``coro`` started on the mesh's loop; its future (cancelling it cancels the call)."""
        return self.loop_thread.submit(coro)

    # --- what was built ---

    def handles(self, kind: str) -> list[Any]:
        """The actors of role ``kind`` ([] before they are built)."""
        return self._actors.get(kind, [])

    def handle(self, kind: str) -> Any:
        """The one actor of role ``kind`` (a single role: ``inference``), or None."""
        return next(iter(self.handles(kind)), None)

    def names(self, kind: str) -> list[str]:
        return [h.name for h in self.handles(kind)]

    def kind_of(self, name: str) -> str | None:
        """The role kind actor ``name`` was spawned as (None: not one of this run's)."""
        return self._kinds.get(name)

    def in_driver(self, name: str) -> bool:
        return name in self._in_driver

    def is_up(self, name: str) -> bool:
        return name not in self._gone and name not in self._down

    def is_down(self, name: str) -> bool:
        return name in self._down

    def is_gone(self, name: str) -> bool:
        return name in self._gone

    def central_inference(self) -> bool:
        """Whether this run computes actions in the inference actor (runners of their own)."""
        return self.inference["mode"] == "central" and self.config.num_env_runners > 0

    def runner_spec(self, kind: str, index: int) -> RunnerSpec:
        """The spec of runner ``index`` of ``kind`` (evaluation runners: with the evaluation
        config the evaluation group handed ``build``)."""
        base = self.args.get(f"{kind}_spec")
        if base is None:
            if self._runner_base is None:
                self._runner_base = RunnerSpec.for_run(self.config, self.policy_specs)
            base = self._runner_base
        central = "inference" in self._actors and kind == "runner"
        source = "param_server" if self.topology.receives_weights(kind) else None
        relay = self.relay_of(f"env_runner-{index}") if kind == "runner" and source else None
        return dataclasses.replace(
            base, worker_index=index, inference_actor=INFERENCE_ACTOR if central else None,
            param_server=relay or source, weights_fallback=source if relay else None)

    # --- nodes: where a launched cluster's scheduler put each actor ---

    def node_of(self, name: str) -> str:
        """The node actor ``name`` is placed on ("": this machine, or not placed)."""
        if self.job is None:
            return ""
        node = self.job.placement.get(name, "")
        return node if node in self.job.nodes else ""

    def runner_nodes(self) -> dict[str, list[str]]:
        """The training runners' names by node, in node order of first appearance ("":
        this machine): what relays and aggregators per node are laid out by."""
        out: dict[str, list[str]] = {}
        role = self.topology.role("runner", self)
        if role is None:
            return out
        for index, here in role.places(self):
            if not here:
                name = role.actor_name(index)
                out.setdefault(self.node_of(name), []).append(name)
        return out

    def relay_plan(self) -> list[tuple[str, list[str], str]]:
        """``(node, its runners, upstream)`` of each weight relay (weights_relay): one per
        node with runners ("auto": under ``rlmesh launch``, each node with two or more,
        where a relay saves a copy), the first ``weights_relay_fanout`` fed by the param
        server, each next one by a relay before it (a tree of that degree). Fixed once
        the job is placed."""
        if self._relay_plan is not None:
            return self._relay_plan
        mode = getattr(self.config, "weights_relay", False)
        if self.topology.role("relay") is None:  # a declaration without relays (ES)
            mode = False
        nodes = self.runner_nodes()
        if mode == "auto":
            nodes = ({n: r for n, r in nodes.items() if n and len(r) >= 2}
                     if self.job is not None and self.job.nodes else {})
        elif not mode:
            nodes = {}
        fanout = max(2, int(getattr(self.config, "weights_relay_fanout", 8)))
        plan = [(node, runners, "param_server" if k < fanout else f"weight_relay-{k // fanout - 1}")
                for k, (node, runners) in enumerate(nodes.items())]
        if self.job is not None:  # placed: fixed from now on, with each runner's relay
            self._relay_plan = plan
            self._relay_of = {name: f"weight_relay-{k}"
                              for k, (_, runners, _) in enumerate(plan) for name in runners}
        return plan

    def relay_of(self, runner: str) -> str | None:
        """The relay serving runner ``runner`` (None: the param server itself)."""
        if self._relay_plan is None:
            self.relay_plan()
        return self._relay_of.get(runner)

    def learner_code(self) -> dict[str, Any]:
        """The code ``add_policy`` messages may name to the learners (import_path)."""
        return startup_code({"config": self.config.to_dict(), "policies": self.policy_specs})

    # --- building ---

    def start_runners(self) -> concurrent.futures.Future[None]:
        """Start the job and the roles of phase "start" (param server, inference, runners)
        on the loop and return at once: the runners' processes start (imports, envs) while
        the driver builds the learner; ``.result()`` waits for them."""
        return self.submit(self._start())

    async def _start(self) -> None:
        cfg = self.config
        # Local processes over ipc, or, under `rlmesh launch`, the cluster's job, which
        # places each actor on a node by this request.
        self.job = await make_job(cfg.resource_request())
        self.job.supervisor.listeners.append(self._on_event)
        self.job.child_env.update(actor_env(cfg))
        # The user's named actors first: envs and callbacks may call them from the start.
        await start_named_actors(self.job, cfg.named_actors)
        self.inference = choose_inference(cfg, self.policy_specs)
        log.info("inference: %s (%s)", self.inference["mode"], self.inference["reason"])
        await self._build("start")

    def build(self, phase: str, **args: Any) -> None:
        """The roles of ``phase`` (``Role.phase``) built, each with its ``args``."""
        self.run(self._build(phase, **args))

    async def _build(self, phase: str, **args: Any) -> None:
        self.args.update(args)
        for role in self.topology.roles:
            if role.phase == phase and role.when(self):
                handles = await self._spawn_role(role)
                if role.after_build is not None:
                    await role.after_build(self, handles)

    async def _spawn_role(self, role: Role) -> list[Any]:
        async def one(index: int, here: bool) -> Any:
            name = role.actor_name(index)
            self._kinds[name] = role.kind
            node = role.node(self, index) if role.node is not None else None
            if node and not here:
                self.job.placement[name] = node
            if here:
                self._in_driver.add(name)
            return await self.job.spawn(
                role.cls_path, name=name, in_process=here, role=role.label,
                restart=restart_policy(self.config, role.restart),
                env=role.env(self) if role.env is not None else None, **role.spec(self, index))

        places = role.places(self)
        handles = list(await asyncio.gather(*(one(i, here) for i, here in places)))
        self._actors[role.kind] = handles
        return handles

    def connect(self) -> None:
        """Each role's ``ready_call``, then the streams the topology declares, in order."""
        self.run(self._connect())

    async def _connect(self) -> None:
        # Calls named by the declarations are held in ``declared``: the protocol table test
        # checks the declared names against the roles (tests/unit/test_topology.py).
        for role in self.topology.roles:
            if role.ready_call and role.when(self):
                declared = role.ready_call
                await asyncio.gather(*(h.call(declared) for h in self.handles(role.kind)))
        for stream in self.topology.streams:
            if stream.via == "spec" or not stream.when(self):
                continue
            self._connected.append(stream)
            if stream.via.startswith("pull:"):
                declared, srcs = stream.via[5:], self.names(stream.src)
                await asyncio.gather(*(h.call(declared, srcs) for h in self.handles(stream.dst)))
            else:
                await asyncio.gather(*(self._open(stream, i, h)
                                       for i, h in enumerate(self.handles(stream.src))))

    async def _open(self, stream: Any, index: int, src: Any) -> None:
        window, declared = stream.window_in(self.config), stream.via
        await src.call(declared, self._sinks_of(stream, index), window)

    def _sinks_of(self, stream: Any, index: int) -> list[str]:
        """The sinks source number ``index`` of ``stream`` sends to (fan "node": one on its
        own node, by its position among that node's sources)."""
        sinks = self.names(stream.dst)
        if stream.fan != "node":
            return stream.sinks(index, sinks)
        srcs = self.names(stream.src)
        node = self.node_of(srcs[index])
        mates = [n for n in srcs if self.node_of(n) == node]
        local = [n for n in sinks if self.node_of(n) == node]
        return stream.sinks(index, sinks, (mates.index(srcs[index]), local))

    def stop(self) -> None:
        """Every process of the run stopped, then the loop: the mesh is done."""
        try:
            if self.job is not None:
                self.run(self.job.shutdown(), timeout=30)
                self.job = None
        finally:
            self.loop_thread.close()

    # --- supervision: by the kind each actor was spawned as ---

    def _on_event(self, event: Any) -> None:
        kind = self._kinds.get(event.name, "")
        if event.kind in ("died", "hung"):
            self._down.add(event.name)
            if kind == "learner":  # its optimizer state exists nowhere else: the run ends
                self.learner_failure = f"{event.name} {event.kind}: {event.detail}"
                self.failed_learner = event.name
                if event.last_lines:
                    self.learner_failure += ("\n  last lines:\n    "
                                             + "\n    ".join(event.last_lines[-10:]))
        elif event.kind == "restarted":
            self._down.discard(event.name)
            self.totals.restarted(event.name)
            self.restarts_of[kind] += 1
            self._reconnect(kind, event.name)
        elif event.kind == "gave_up":
            self._gone.add(event.name)
            if event.cause == "crashes" and kind in ("runner", "eval_runner"):
                self.runner_failure = self.runner_failure or crash_message(self.config, event)

    def _reconnect(self, kind: str, name: str) -> None:
        """A restarted actor's streams opened afresh: as a source, its own; as a sink, its
        sources start new ones (what was in flight to it is lost); a pulling sink is told."""
        loop = asyncio.get_running_loop()
        for stream in self._connected:
            srcs = self.handles(stream.src)
            if stream.src == kind and stream.via.startswith("pull:") and stream.on_src_restart:
                index, declared = self.names(kind).index(name), stream.on_src_restart
                for h in self.handles(stream.dst):
                    loop.create_task(self._tell(h, declared, index))
            elif stream.src == kind and not stream.via.startswith("pull:"):
                index, declared = [h.name for h in srcs].index(name), stream.via
                loop.create_task(self._tell(srcs[index], declared,
                                            self._sinks_of(stream, index),
                                            stream.window_in(self.config)))
            elif stream.dst == kind and not stream.via.startswith("pull:"):
                for i, src in enumerate(srcs):
                    if self._sinks_of(stream, i) == [name]:
                        loop.create_task(self._tell(src, "reset_streams", f"{name} restarted"))

    async def _tell(self, actor: Any, method: str, *args: Any) -> None:
        try:
            await actor.call(method, *args, timeout=10)
        except Exception as exc:
            log.warning("%s.%s failed: %s", actor.name, method, exc)

    def messages_sent(self) -> dict[str, int]:
        """What the driver's process has sent the run's actors since it started: calls
        (requests and stream items, each handle's count), the supervisor's heartbeat pings
        and its polls of node agents (issue 50: the driver's messages per iteration)."""
        if self.job is None:
            return {"calls": 0, "pings": 0, "polls": 0}
        traffic = self.job.supervisor.traffic()
        return {"calls": sum(h.stats["calls"] for h in list(self.job.handles.values())),
                "pings": sum(t["messages"] for t in traffic["pings"].values()),
                "polls": int(traffic["polls"].get("polls", 0))}

    def messages_this_iteration(self) -> dict[str, int]:
        """``messages_sent`` since the last call (an iteration's: results' driver_messages)."""
        sent, before = self.messages_sent(), self._messages_before
        self._messages_before = sent
        return {k: v - before.get(k, 0) for k, v in sent.items()}

    def next_version(self) -> int:
        """A weights version above every one published or handed out before: weights sent
        to one runner directly (A3C) count from the same number, so a runner always takes
        the newer of those and the param server's."""
        self.version += 1
        return self.version
