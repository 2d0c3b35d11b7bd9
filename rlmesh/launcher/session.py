"""One cluster job's head side: has its provider (providers/) prepare the nodes (over SSH:
CURVE keys, synced files, setup commands), starts an agent per node as a supervised child
of the head's Job (over SSH, or joined from a Slurm step or a pod), places
the run's actors with the scheduler, re-places runners when a node dies, and brings the
nodes' output home prefixed by node and actor.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
import sys
from pathlib import Path
from typing import Any, Callable

from rlmesh.launcher.cluster_config import ClusterConfig
from rlmesh.launcher.providers import Provider, provider_for
from rlmesh.launcher.remote import NodeLink
from rlmesh.placement.scheduler import Placement, PlacementError, place, replace
from rlmesh.runtime import ActorEvent, Job, RestartPolicy
from rlmesh.runtime.logtail import LogLines
from rlmesh.runtime.process import ChildSpec
from rlmesh.runtime.resources import PlacementGroup
from rlmesh.wire.security import ClusterKeys, make_cluster_keys, use_keys

log = logging.getLogger(__name__)

NOISY = ("WARNING", "ERROR", "CRITICAL", "Traceback", "Error", "error:")
STATE_S = 2.0  # how often the head rewrites its state file (heartbeat ages)


class ClusterSession:
    """The head of one cluster job: ``prepare()`` (blocking), then ``job_for(request)`` on
    the run's event loop (installed as the runtime's job factory by ``install()``)."""

    def __init__(self, cluster: ClusterConfig, *, verbose: bool = False,
                 echo: Callable[[str], None] | None = None, state_name: str = "head.json",
                 used: dict[str, dict[str, float]] | None = None) -> None:
        # The provider fills in what the file leaves to it (a Slurm allocation's nodes).
        self.provider: Provider = provider_for(cluster)
        self.cluster = cluster = self.provider.resolve()
        # A sweep's trial is a session of its own on the head: its own state file, and the
        # resources the sweep's other trials hold counted as taken when it places.
        self.state_name = state_name
        self.used = used or {}
        self.verbose = verbose
        self.echo = echo or (lambda line: print(line, file=sys.stderr, flush=True))
        self._lines = LogLines()  # which output lines are detail: the log file's, not the console's
        self.state_dir = cluster.state_dir
        self.keys: ClusterKeys | None = None
        self.job: Job | None = None
        self.links: dict[str, NodeLink] = {}
        self.detected: dict[str, dict[str, float]] = {}
        self.dead: set[str] = set()
        self._groups: list[PlacementGroup] = []
        self._placement: Placement | None = None
        self._labels: dict[str, tuple[int, int]] = {}
        self._names: dict[str, str] = {}  # actor -> node, as placed

    # --- before the run: nodes over SSH ---

    def prepare(self) -> None:
        """CURVE keys made here, then the provider's preparation of its nodes (over SSH:
        the keys copied, files synced, setup run)."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if self.cluster.security.curve:
            self.keys = self.provider.keys() or make_cluster_keys(self.state_dir / "keys")
            use_keys(self.keys)
        self.provider.prepare(self.keys.directory if self.keys else None)

    def attach(self) -> None:
        """Use the keys a prepared session (the launch's head) made: a sweep's trial joins the
        nodes ``rlmesh launch`` prepared, without making new keys or syncing again."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if self.cluster.security.curve:
            self.keys = ClusterKeys.load(self.state_dir / "keys")
            use_keys(self.keys)
        self.provider.attach(self.keys.directory if self.keys else None)

    # --- the run's job ---

    def install(self) -> None:
        from rlmesh.runtime.job import set_job_factory

        set_job_factory(self.job_for)

    async def start(self) -> Job:
        """The head's Job on the cluster interface, with an agent on every node."""
        if self.job is not None and self.job.started:
            return self.job
        # A script's second algorithm: the first one's stop shut the job and its agents down.
        self.links.clear()
        head = self.cluster.head.host
        job = self.job = await Job("tcp", host=head).start()
        job.supervisor.listeners.append(self._on_event)
        job.replace_node = self._replace_node
        try:
            await self.provider.begin(job)
            await asyncio.gather(*(self._start_agent(job, n.name) for n in self.cluster.nodes))
            got = await asyncio.gather(*(l.agent.call("resources", timeout=30)
                                         for l in self.links.values()))
        except BaseException:
            await job.shutdown()
            raise
        self.detected = dict(zip(self.links, got))
        self._write_state()
        self._state_task = asyncio.ensure_future(self._keep_state())
        job.on_shutdown.append(self._state_task.cancel)
        return job

    async def _keep_state(self) -> None:
        """Rewrite the state file every STATE_S, with each process's heartbeat age as the
        head's supervisor sees it (`rlmesh status` shows it)."""
        while self.job is not None and self.job.started:
            await asyncio.sleep(STATE_S)
            # With what the run placed by node itself (a node's relay and aggregators).
            self._write_state({**self.job.placement, **self._names})

    async def _start_agent(self, job: Job, node: str) -> None:
        spec = ChildSpec(name=f"agent-{node}", cls_path="rlmesh.launcher.agent:NodeAgent",
                         role="NodeAgent")
        make = self.provider.make_agent(job, node)
        handle = await job.spawn_child(spec, make, RestartPolicy(max_restarts=0),
                                       start_timeout=self.provider.start_timeout)
        link = NodeLink(node, handle, self._on_output)
        job.supervisor.traffic_sources.append(link.traffic)  # its polls: supervision traffic
        job.nodes[node] = link
        self.links[node] = link
        link.start_watching()

    async def job_for(self, request: list[PlacementGroup] | None) -> Job:
        """The job of a run asking for ``request``: each bundle's actor placed on a node
        (the driver's stays here, on the head); PlacementError if it cannot fit, before any
        agent starts where the provider says what the nodes have (a Slurm allocation)."""
        if request and (self.job is None or not self.job.started):
            self._check_fits(request)
        job = await self.start()
        if request:
            job.placement = self.place(request)
        return job

    def _check_fits(self, request: list[PlacementGroup]) -> None:
        """Place ``request`` on the nodes as the provider gave them, before their agents
        start: a job that cannot fit the allocation is refused with nothing started. Where
        a node's CPUs are not known yet it is left to the agents' detection; its GPUs,
        where the job asks for none, do not matter (counted as 0)."""
        groups = _without_driver(request)
        asks_gpu = any(b.resources.get("GPU", 0) for g in groups for b in g.bundles)
        guess: dict[str, dict[str, float]] = {}
        for n in self.cluster.nodes:
            if "CPU" not in n.resources or ("GPU" not in n.resources and asks_gpu):
                return
            guess[n.name] = {"GPU": 0.0, "memory": float(2 ** 60)}
        if self.cluster.head.takes_work:
            return
        place(groups, self.cluster.scheduler_nodes(guess), self.used)

    def place(self, request: list[PlacementGroup]) -> dict[str, str]:
        groups = _without_driver(request)
        nodes = self.cluster.scheduler_nodes(self.detected)
        self._placement = place(groups, nodes, self.used)
        self._groups = groups
        self._labels = {b.label: (gi, bi) for gi, g in enumerate(groups)
                        for bi, b in enumerate(g.bundles)}
        names = {label: self._placement[key] for label, key in self._labels.items()}
        log.info("placement: %s", names)
        self.echo(placement_table(nodes, names))
        self._names = names
        self._write_state(names)
        return names

    @property
    def placed(self) -> dict[str, str]:
        """actor -> node, as the scheduler placed the run's actors."""
        return dict(self._names)

    def _replace_node(self, actor: str) -> str:
        """Where ``actor`` goes now that its node is gone (``dead``): the scheduler again,
        everything else staying put."""
        if self._placement is None or actor not in self._labels:
            return "head"
        nodes = self.cluster.scheduler_nodes({n: r for n, r in self.detected.items()
                                              if n not in self.dead})
        nodes = [n for n in nodes if n.name not in self.dead]
        try:
            self._placement = replace(self._placement, sorted(self.dead), self._groups, nodes)
        except PlacementError as exc:
            raise RuntimeError(f"cannot place {actor} again: {exc}") from None
        return self._placement[self._labels[actor]]

    # --- events and output ---

    def _on_event(self, event: ActorEvent) -> None:
        if event.name.startswith("agent-") and event.kind in ("died", "hung"):
            node = event.name[len("agent-"):]
            self.dead.add(node)
            link = self.links.get(node)
            if link is not None:
                link.lost(event.detail.splitlines()[0])
            self.echo(f"[{node}] node lost: {event.detail.splitlines()[0]}")

    def _on_output(self, node: str, name: str, text: str) -> None:
        assert self.job is not None
        with open(self.job.run_dir.log_path(name), "a", encoding="utf-8") as fh:
            fh.write(text)
        for line in text.splitlines():
            _, detail, _ = self._lines.read((node, name), line)
            if self.verbose or (not detail and any(word in line for word in NOISY)):
                self.echo(f"[{node} {name}] {line}")

    def _write_state(self, placement: dict[str, str] | None = None) -> None:
        """What `rlmesh status|stack|down` read to find this head and its agents."""
        assert self.job is not None
        placed = self._placement
        state = {"pid": os.getpid(), "job_id": self.job.job_id, "host": socket.gethostname(),
                 "provider": self.cluster.provider,
                 "slurm_job": getattr(getattr(self.provider, "allocation", None), "job_id", None),
                 "run_dir": str(self.job.run_dir.path), "head": self.cluster.head.host,
                 "agents": {n: l.agent.address for n, l in self.links.items()},
                 "resources": self.detected, "placement": placement or {},
                 "used": {n: dict(r) for n, r in placed.used.items()} if placed else {},
                 "free": {n: dict(r) for n, r in placed.free.items()} if placed else {},
                 "heartbeat_age_s": self._heartbeat_ages()}
        path = self.state_dir / self.state_name
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1))
        os.replace(tmp, path)

    def _heartbeat_ages(self) -> dict[str, float]:
        if self.job is None:
            return {}
        now = time.monotonic()
        return {name: round(now - sup.watch.last_pong, 2)
                for name, sup in list(self.job.supervisor.children.items())}

    async def shutdown(self) -> None:
        if getattr(self, "_state_task", None) is not None:
            self._state_task.cancel()
        # The job first: stopping the actors on the nodes needs the links (their exits come
        # in the agents' polls; with the links closed first each waited out its grace).
        if self.job is not None:
            if self.job.started:
                await self.job.shutdown()
            self.job = None
        for link in self.links.values():
            link.close()
        await self.provider.end()
        (self.state_dir / self.state_name).unlink(missing_ok=True)

    def close(self) -> None:
        self.provider.close()
        path = self.state_dir / self.state_name
        try:
            if json.loads(path.read_text()).get("pid") == os.getpid():
                path.unlink()  # this head is done: status and stack find no stale one
        except (OSError, ValueError):
            pass
        from rlmesh.runtime.job import set_job_factory

        set_job_factory(None)


def _without_driver(request: list[PlacementGroup]) -> list[PlacementGroup]:
    """The request's groups less the driver's bundle (the head runs the driver)."""
    groups = []
    for g in request:
        bundles = tuple(b for b in g.bundles if b.label != "driver")
        if bundles:
            groups.append(PlacementGroup(bundles, g.strategy, g.name))
    return groups


def placement_table(nodes: list[Any], names: dict[str, str]) -> str:
    """What the scheduler placed where, one line per node (in the cluster's order): its
    CPUs and GPUs and its actors. The same job on the same nodes prints the same table,
    whatever the provider."""
    by_node: dict[str, list[str]] = {}
    for actor, node in names.items():
        by_node.setdefault(node, []).append(actor)
    width = max([len(n.name) for n in nodes] + [4])
    lines = [f"rlmesh: placement of {len(names)} actors on {len(nodes)} nodes:"]
    for n in nodes:
        have = f"CPU {n.resources.get('CPU', 0):g} GPU {n.resources.get('GPU', 0):g}"
        actors = sorted(by_node.get(n.name, []), key=_natural)
        lines.append(f"  {n.name:<{width}}  {have:<16} {', '.join(actors) or '-'}")
    return "\n".join(lines)


def _natural(name: str) -> tuple[Any, ...]:
    import re

    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def load_state(cluster: ClusterConfig) -> dict[str, Any] | None:
    """The running head's state file, if its process is alive. A head on another machine
    (a Slurm job's batch host, beside a login node sharing the home folder) is alive while
    it keeps rewriting the file; ``local`` says which."""
    path = Path(cluster.state_dir) / "head.json"
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    state["local"] = state.get("host", socket.gethostname()) == socket.gethostname()
    if not state["local"]:
        try:
            fresh = time.time() - path.stat().st_mtime < 10 * STATE_S
        except OSError:
            return None
        return state if fresh else None
    try:
        os.kill(state["pid"], 0)
    except (ProcessLookupError, PermissionError):
        return None
    return state


def join_trial(cluster: dict[str, Any], trial_id: str) -> ClusterSession:
    """A trial of a sweep that `rlmesh launch` runs (tune's worker calls it by the path the
    launch gave the sweep): a cluster session of its own on the head, joined to the nodes
    the launch prepared, installed so that build_algorithm places the trial's actors there
    (the scheduler, counting what the sweep's other trials hold)."""
    from rlmesh.launcher.cluster_config import load_cluster

    session = ClusterSession(load_cluster(cluster["file"]), state_name=f"trial-{trial_id}.json",
                             used=cluster["used"], echo=print)
    session.attach()
    session.install()
    return session
