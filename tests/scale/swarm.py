"""The swarm harness's driver: ``python -m tests.scale.swarm --help`` (``make scale``).

One run (``run_swarm``) starts a real ``Job`` (``--local``: processes on this machine over
ipc; else a ``ClusterSession`` over real SSH agents on network-namespace nodes made with
deploy/netns-cluster.sh), and in it the real ``ParamServer``, one ``WeightRelay`` per node
(``--relay``, once rlmesh/roles/weight_relay.py exists), the real ``Aggregator`` actors, a
counting learner (``SinkLearner``: same stream protocol, no training) and H ``SwarmHost``
processes per node holding N / (M x H) simulated runners each (swarm_host.py). It then
publishes ``--versions`` weights versions of S MB at ``--interval`` and measures per version:

- broadcast: seconds from ``set_weights`` until each sim first holds the version (p50, p99,
  max over sims; all processes are on this machine, one clock);
- bytes the param server (and each relay) sent for it: their ``stats()["bytes_by_version"]``
  where the param server has it, else pushes x model size (marked ``~``);
- CPU seconds of each role's processes while it spread (psutil on their pids);
- the driver's messages: its calls (``ActorHandle.stats``) and its supervision traffic
  (``Supervisor.traffic``: heartbeat pings, polls of the node agents), per version and a second;

and over the whole run the fragments/s the aggregators took in, batches/s and bytes per
batch the learner took, and the RSS of every role. At the end the hosts stop streaming, and
every fragment a ledger says was sent is matched to the aggregators' counts (``account``):
taken, refused, or lost in flight at a kill (``--kill-fraction``: whole hosts SIGKILLed at
random times, restarted by the real supervisor).

Sweeps (``--sweep``): ``n-model`` (N x model MB, one table) and ``rate`` (fragments/s per sim);
combinations that do not fit in memory are skipped with the reason printed. Each table is
markdown, printed and appended to ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from rlmesh.roles.aggregator import Aggregator
from rlmesh.roles.paramserver import ParamServer
from rlmesh.roles.specs import AggregatorSpec
from rlmesh.runtime import Job, RestartPolicy
from tests.scale.sink_learner import SinkLearner
from tests.scale.swarm_host import (POLICY, SwarmHost, fragment_bytes,
                                    make_fragment)

MB = 1 << 20
MEMORY_BUDGET = 20 * (1 << 30)  # of the 24 GiB machine: what a run may plan to hold at once
HOST_RSS = 90 * MB  # a swarm host's own memory (python, numpy, zmq), measured
LEARNER = "learner-0"

def heartbeat(job: Job) -> tuple[int, int]:
    """Supervision messages and bytes the driver's process sent so far: its heartbeat pings
    (to local children and node agents) and its polls of the agents (``Supervisor.traffic``)."""
    traffic = job.supervisor.traffic()
    pings = traffic["pings"].values()
    return (sum(t["messages"] for t in pings) + int(traffic["polls"].get("polls", 0)),
            sum(t["bytes"] for t in pings) + int(traffic["polls"].get("bytes", 0)))


@dataclass
class SwarmConfig:
    """One run of the swarm."""

    runners: int = 10  # N simulated runners
    model_mb: float = 1.0  # S: one weights version's size
    versions: int = 5  # versions published (after the first, which the sims subscribe to)
    interval: float = 1.0  # seconds between publications (at least: each waits for its spread)
    fragment_kb: float = 4.0  # one fragment's bytes / 1024
    fragment_rate: float = 1.0  # fragments a second per sim (0: none)
    window: int = 2  # fragments in flight per sim
    hosts: int = 0  # swarm host processes (0: one per 100 sims, at least one per node)
    aggregators: int = 1  # per node (namespace run) or in all (local)
    batch_steps: int = 512  # env steps of a train batch
    relay: bool = False  # one weight relay per node
    nodes: int = 0  # namespace nodes (0: --local)
    kill_fraction: float = 0.0  # of the sims, killed (whole hosts) during the run
    minutes: float = 0.0  # run at least this long (the robustness run), publishing on
    spread_timeout: float = 120.0  # a version not everywhere by then is reported as such
    subscribe_timeout: float = 900.0  # every sim subscribed by then, or measured without
    seed: int = 0

    @property
    def local(self) -> bool:
        return self.nodes == 0

    def host_count(self) -> int:
        """Hosts in all: ``hosts``, else one per 100 sims; a multiple of the nodes."""
        nodes = max(1, self.nodes)
        n = self.hosts or -(-self.runners // 100)
        return nodes * max(1, -(-min(n, self.runners) // nodes))


@dataclass
class VersionRow:
    version: int
    holders: int = 0
    p50: float = float("nan")
    p99: float = float("nan")
    max: float = float("nan")
    ps_bytes: int = 0
    ps_bytes_estimated: bool = False
    relay_bytes: int = 0
    cpu: dict[str, float] = field(default_factory=dict)
    driver_calls: int = 0
    driver_pings: int = 0


@dataclass
class SwarmResult:
    config: SwarmConfig
    versions: list[VersionRow]
    subscribe_s: float
    seconds: float
    fragments_per_s: float
    batches_per_s: float
    bytes_per_batch: float
    fragment_bytes: int
    pings_per_s: float  # supervision messages (pings, agent polls) a second
    heartbeat_bytes_per_s: float
    supervised: int
    rss_mb: dict[str, float]
    account: dict[str, Any]
    kills: int = 0
    notes: list[str] = field(default_factory=list)

    def median(self, key: str) -> float:
        values = [getattr(r, key) for r in self.versions if not np.isnan(getattr(r, key))]
        return float(np.median(values)) if values else float("nan")


# --- memory: what a run would hold ---

def fits(cfg: SwarmConfig) -> str | None:
    """Why ``cfg`` cannot run within MEMORY_BUDGET, or None: each host may hold every one of
    its sims' pushes at once (received, not yet dropped), the param server one push buffer
    per subscriber in flight (zero-copy: the same array), and each host its own memory."""
    hosts = cfg.host_count()
    per_host = -(-cfg.runners // hosts)
    model = cfg.model_mb * MB
    need = hosts * (HOST_RSS + per_host * model) + 3 * model + 500 * MB
    if need > MEMORY_BUDGET:
        return (f"N={cfg.runners} x {cfg.model_mb:g} MB: up to {need / (1 << 30):.1f} GiB of "
                f"pushes in flight at once (> {MEMORY_BUDGET / (1 << 30):.0f} GiB budget)")
    return None


# --- processes ---

def _role_of(name: str) -> str:
    for prefix, role in (("param_server", "param_server"), ("weight_relay", "relay"),
                         ("aggregator", "aggregator"), ("learner", "learner"),
                         ("swarm_host", "hosts")):
        if name.startswith(prefix):
            return role
    return "other"


class Pids:
    """The pid of each role's processes (every node is this machine), refreshed on restarts."""

    def __init__(self, job: Job, extra_dirs: list[Path]) -> None:
        self.job = job
        self.extra_dirs = extra_dirs
        self.procs: dict[str, psutil.Process] = {}
        self.peak: dict[str, float] = {}  # the largest rss_mb() seen, by key

    def refresh(self) -> dict[str, psutil.Process]:
        from rlmesh.runtime.run_dir import RunDir

        records = list(self.job.run_dir.processes())
        for d in self.extra_dirs:  # the nodes' run directories (agents, actors there)
            if d.is_dir():
                records += list(RunDir(d).processes())
        for rec in records:
            if rec.name == self.job.name:
                continue
            cur = self.procs.get(rec.name)
            if cur is None or cur.pid != rec.pid:
                try:
                    self.procs[rec.name] = psutil.Process(rec.pid)
                except psutil.NoSuchProcess:
                    pass
        self.procs["driver"] = psutil.Process()
        return self.procs

    def cpu(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for name, proc in list(self.procs.items()):
            try:
                t = proc.cpu_times()
            except psutil.NoSuchProcess:
                continue
            role = "driver" if name == "driver" else _role_of(name)
            out[role] = out.get(role, 0.0) + t.user + t.system
        return out

    def rss_mb(self) -> dict[str, float]:
        """The largest RSS of one process of each role, MB (hosts: also their sum)."""
        out: dict[str, float] = {}
        total_hosts = 0.0
        for name, proc in list(self.procs.items()):
            try:
                rss = proc.memory_info().rss / MB
            except psutil.NoSuchProcess:
                continue
            role = "driver" if name == "driver" else _role_of(name)
            out[role] = max(out.get(role, 0.0), rss)
            if role == "hosts":
                total_hosts += rss
        out["hosts_total"] = total_hosts
        for k, v in out.items():
            self.peak[k] = max(self.peak.get(k, 0.0), v)
        return out


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def relay_available() -> bool:
    return importlib.util.find_spec("rlmesh.roles.weight_relay") is not None


# --- one run ---

async def run_swarm(cfg: SwarmConfig, *, job: Job | None = None, nodes: list[str] | None = None,
                    node_dirs: list[Path] | None = None, echo: Any = print) -> SwarmResult:
    """One swarm run in ``job`` (a started local Job is made when None) over ``nodes`` (the
    job's node names; None: this machine)."""
    rng = random.Random(cfg.seed)
    own_job = job is None
    if job is None:
        job = await Job("ipc").start()
    acct_dir = Path(tempfile.mkdtemp(prefix="rlmesh-swarm-"))
    notes: list[str] = []
    node_list: list[str | None] = list(nodes) if nodes else [None]
    try:
        return await _run(cfg, job, node_list, acct_dir, rng, notes, node_dirs or [], echo)
    finally:
        if own_job:
            await job.shutdown()
        shutil.rmtree(acct_dir, ignore_errors=True)


async def _run(cfg: SwarmConfig, job: Job, node_list: list[str | None], acct_dir: Path,
               rng: random.Random, notes: list[str], node_dirs: list[Path],
               echo: Any) -> SwarmResult:
    weights_len = max(1, int(cfg.model_mb * MB) // 4)
    version = 1
    ps = await job.spawn(ParamServer, name="param_server")  # on the head
    await ps.call("set_weights", version, {POLICY: {"w": np.zeros(weights_len, np.float32)}})
    await job.spawn(SinkLearner, name=LEARNER)
    agg_spec = {"config": {"train_batch_size": cfg.batch_steps}, "learners": [LEARNER]}
    aggregators: list[str] = []
    agg_node: list[str | None] = []
    for node in node_list:
        for _ in range(cfg.aggregators):
            name = f"aggregator-{len(aggregators)}"
            spec = AggregatorSpec(**agg_spec, index=len(aggregators)).to_data()
            await job.spawn(Aggregator, name=name, node=node, spec=spec)
            aggregators.append(name)
            agg_node.append(node)
    # Hosts: spread over the nodes, sims split evenly; each streams to an aggregator of its node.
    n_hosts = cfg.host_count()
    sims = np.array_split(np.arange(cfg.runners), n_hosts)
    relays: dict[str | None, str] = {}
    if cfg.relay:
        if not relay_available():
            notes.append("--relay: rlmesh/roles/weight_relay.py is not there yet; param server direct")
        else:
            from rlmesh.roles.specs import RelaySpec
            from rlmesh.roles.weight_relay import WeightRelay

            for i, node in enumerate(node_list):
                name = f"weight_relay-{i}"
                mine = [f"env_runner-{int(j)}" for h, part in enumerate(sims)
                        if node_list[h % len(node_list)] == node for j in part]
                spec = RelaySpec(config={}, node=node or "", index=i, runners=mine,
                                 policies=[POLICY]).to_data()
                await job.spawn(WeightRelay, name=name, node=node, spec=spec)
                relays[node] = name
    fragment = make_fragment(int(cfg.fragment_kb * 1024))
    host_names = []
    t_sub = time.time()
    for h in range(n_hosts):
        node = node_list[h % len(node_list)]
        mine = [a for a, n in zip(aggregators, agg_node) if n == node]
        name = f"swarm_host-{h}"
        await job.spawn(SwarmHost, name=name, node=node, restart=RestartPolicy(max_restarts=1000)
                        if cfg.kill_fraction else None,
                        index=h, sims=[int(i) for i in sims[h]], source=relays.get(node, "param_server"),
                        sink=mine[h // len(node_list) % len(mine)], fragment_size=int(cfg.fragment_kb * 1024),
                        fragment_rate=cfg.fragment_rate, window=cfg.window, acct_dir=str(acct_dir),
                        hold=node is not None)
        host_names.append(name)
    hosts = [job.handles[n] for n in host_names]
    if node_list != [None]:  # the sims' names live on their nodes: the head's param server
        for h in hosts:  # finds them by the names registered here, as a runner's spawn does
            for sim, address in (await h.call("addresses")).items():
                job.run_dir.register_name(sim, address, os.getpid(), replace=True)
        await asyncio.gather(*(h.call("go") for h in hosts))
    deadline = t_sub + cfg.subscribe_timeout
    while (ready := sum(await asyncio.gather(*(h.call("ready") for h in hosts)))) < cfg.runners:
        if time.time() > deadline:
            notes.append(f"only {ready} of {cfg.runners} sims subscribed within "
                         f"{cfg.subscribe_timeout:.0f} s; measuring anyway")
            break
        await asyncio.sleep(0.2)
    subscribe_s = time.time() - t_sub
    failures = sum(s["counts"]["subscribe_failures"] for s in
                   await asyncio.gather(*(h.call("stats", 1 << 30) for h in hosts)))
    if failures:
        whys: dict[str, int] = {}
        for st in await asyncio.gather(*(h.call("stats", 1 << 30) for h in hosts)):
            for why, n in st["failures"].items():
                key = why.split(" at ")[0] if "did not answer" in why else why
                whys[key.split("'env_runner-")[0]] = whys.get(key.split("'env_runner-")[0], 0) + n
        notes.append(f"{failures} subscribe calls failed and were tried again: "
                     + "; ".join(f"{n} x {w}" for w, n in sorted(whys.items(), key=lambda x: -x[1])))
    pids = Pids(job, node_dirs)
    pids.refresh()
    agg_handles = [await job.get_actor(a) for a in aggregators]
    sink = await job.get_actor(LEARNER)

    async def agg_taken() -> int:
        return sum(s["num_fragments"] for s in await asyncio.gather(*(a.call("stats") for a in agg_handles)))

    # Kills: whole hosts, SIGKILL, at random times over the run, until kill_fraction of sims.
    run_s = max(cfg.minutes * 60, 0.0)
    kill_times: list[float] = []
    if cfg.kill_fraction > 0:
        per_host = cfg.runners / n_hosts
        n_kills = max(1, round(cfg.kill_fraction * cfg.runners / per_host))
        horizon = run_s or cfg.versions * cfg.interval
        kill_times = sorted(rng.uniform(0.1 * horizon, 0.8 * horizon) for _ in range(n_kills))
    kills = 0
    t_start = time.time()
    taken0, sink0 = await agg_taken(), await sink.call("stats")
    beat0 = heartbeat(job)
    rows: list[VersionRow] = []
    while True:
        elapsed = time.time() - t_start
        if len(rows) >= cfg.versions and elapsed >= run_s:
            break
        while kill_times and elapsed >= kill_times[0]:
            kill_times.pop(0)
            victim = rng.choice(host_names)
            sup = job.supervisor.children.get(victim)
            if sup is not None and sup.child.poll() is None:
                os.kill(sup.child.pid, signal.SIGKILL)
                kills += 1
                echo(f"  killed {victim} (pid {sup.child.pid}) at {elapsed:.1f} s")
        version += 1
        rows.append(await _publish(cfg, job, ps, hosts, pids, version, weights_len, relays))
        rest = cfg.interval - (time.time() - t_start - elapsed)
        if rest > 0:
            await asyncio.sleep(rest)
    seconds = time.time() - t_start
    if relays:
        fell = sum(st["on_fallback"] for st in await asyncio.gather(*(h.call("stats", 1 << 30)
                                                                     for h in hosts)))
        if fell:
            notes.append(f"{fell} sims took their weights from the param server at the end "
                         f"(their relay did not answer their subscribe in time)")
    taken1, sink1 = await agg_taken(), await sink.call("stats")
    beat1 = heartbeat(job)
    pids.refresh()
    pids.rss_mb()
    rss = dict(pids.peak)
    account = await _account(cfg, hosts, agg_handles, acct_dir, kills, n_hosts)
    batches = sink1["batches"] - sink0["batches"]
    return SwarmResult(
        config=cfg, versions=rows, subscribe_s=subscribe_s, seconds=seconds,
        fragments_per_s=(taken1 - taken0) / seconds, batches_per_s=batches / seconds,
        bytes_per_batch=(sink1["bytes"] - sink0["bytes"]) / batches if batches else float("nan"),
        fragment_bytes=fragment_bytes(fragment), pings_per_s=(beat1[0] - beat0[0]) / seconds,
        heartbeat_bytes_per_s=(beat1[1] - beat0[1]) / seconds,
        supervised=len(job.supervisor.children), rss_mb=rss, account=account, kills=kills,
        notes=notes)


async def _publish(cfg: SwarmConfig, job: Job, ps: Any, hosts: list[Any], pids: Pids,
                   version: int, weights_len: int, relays: dict[Any, str]) -> VersionRow:
    """Publish ``version`` and wait until every sim holds it (or ``spread_timeout``)."""
    row = VersionRow(version)
    weights = {POLICY: {"w": np.full(weights_len, version, np.float32)}}
    before = await ps.call("stats")
    relay_before = [await (await job.get_actor(r)).call("stats") for r in relays.values()]
    pids.refresh()
    cpu0 = pids.cpu()
    calls0, beat0 = _driver_calls(job), heartbeat(job)[0]
    t0 = time.time()
    await ps.call("set_weights", version, weights)
    calls_publish = _driver_calls(job) - calls0  # what a driver itself sends to publish
    deadline = t0 + cfg.spread_timeout
    times: list[float] = []
    while time.time() < deadline:
        await asyncio.sleep(0.05)
        replies = await asyncio.gather(*(h.call("stats", version, timeout=5) for h in hosts),
                                       return_exceptions=True)
        times = [t for r in replies if isinstance(r, dict) for t in r["arrivals"].get(str(version), [])]
        held = sum(v >= version for r in replies if isinstance(r, dict) for v in r["held"])
        if held >= cfg.runners:
            break
    lat = [t - t0 for t in times]
    row.holders = len(lat)
    row.p50, row.p99, row.max = _percentile(lat, 50), _percentile(lat, 99), max(lat, default=float("nan"))
    pids.refresh()
    cpu1 = pids.cpu()
    pids.rss_mb()  # sampled as the version lands: the hosts' peak
    row.cpu = {k: cpu1[k] - cpu0.get(k, 0.0) for k in cpu1}
    after = await ps.call("stats")
    if "bytes_by_version" in after:
        row.ps_bytes = int(after["bytes_by_version"].get(version, after["bytes_by_version"].get(str(version), 0)))
    else:
        row.ps_bytes_estimated = True
        sent = (after["pushes"] - before["pushes"]) + (after["fetches"] - before["fetches"])
        row.ps_bytes = sent * weights_len * 4
    for r, b in zip(relays.values(), relay_before):
        a = await (await job.get_actor(r)).call("stats")
        by = a.get("bytes_by_version", {})
        row.relay_bytes += int(by.get(version, by.get(str(version), 0)))
    row.driver_calls = calls_publish
    row.driver_pings = heartbeat(job)[0] - beat0
    return row


def _driver_calls(job: Job) -> int:
    return sum(h.stats["calls"] for h in list(job.handles.values()))


async def _account(cfg: SwarmConfig, hosts: list[Any], aggs: list[Any], acct_dir: Path,
                   kills: int, n_hosts: int) -> dict[str, Any]:
    """Stop the streams, then match every fragment the ledgers say was sent to the
    aggregators' counters: sent == taken + refused + lost (known) + lost at a kill."""
    await asyncio.gather(*(h.call("stop_streams", timeout=60) for h in hosts),
                         return_exceptions=True)
    totals = {"S": 0, "X": 0, "R": 0, "L": 0}
    for ledger in acct_dir.glob("host-*.log"):
        for line in ledger.read_bytes().splitlines():
            kind, _, n = line.decode().split()
            totals[kind] += int(n)
    stats = await asyncio.gather(*(a.call("stats") for a in aggs))
    taken = sum(s["num_fragments"] for s in stats)
    refused_agg = sum(s["num_fragments_lost"] for s in stats)
    sent = totals["S"] - totals["X"]
    at_kill = sent - taken - totals["R"] - totals["L"]
    bound = kills * (-(-cfg.runners // n_hosts)) * (cfg.window + 1)
    return {"sent": sent, "taken": taken, "refused": totals["R"], "refused_by_aggregators":
            refused_agg, "lost_stream_broke": totals["L"], "lost_at_kill": at_kill,
            "lost_at_kill_bound": bound, "ok": 0 <= at_kill <= bound and totals["R"] == refused_agg}


# --- tables ---

def _fmt_s(x: float) -> str:
    return "-" if np.isnan(x) else (f"{x * 1000:.0f} ms" if x < 1 else f"{x:.2f} s")


def _mb(x: float) -> str:
    return f"{x / MB:.1f}"


def result_row(r: SwarmResult) -> dict[str, str]:
    c = r.config
    full = [v for v in r.versions if v.holders >= c.runners]
    ps_bytes = np.median([v.ps_bytes for v in r.versions]) if r.versions else 0
    est = "~" if any(v.ps_bytes_estimated for v in r.versions) else ""
    cpu = {k: np.median([v.cpu.get(k, 0.0) for v in r.versions]) for k in
           ("param_server", "relay", "hosts", "aggregator", "driver")}
    return {
        "N": str(c.runners), "model MB": f"{c.model_mb:g}",
        "nodes": str(c.nodes or "local"), "relay": "yes" if c.relay else "no",
        "hosts": str(c.host_count()),
        "subscribe": _fmt_s(r.subscribe_s),
        "bcast p50": _fmt_s(r.median("p50")), "bcast p99": _fmt_s(r.median("p99")),
        "bcast max": _fmt_s(r.median("max")),
        "all held": f"{len(full)}/{len(r.versions)}",
        "PS MB/version": f"{est}{_mb(ps_bytes)}",
        "relays MB/version": _mb(np.median([v.relay_bytes for v in r.versions])) if c.relay else "-",
        "CPU s/version PS": f"{cpu['param_server']:.3f}",
        "relays": f"{cpu['relay']:.3f}" if c.relay else "-",
        "hosts(all)": f"{cpu['hosts']:.3f}",
        "driver": f"{cpu['driver']:.3f}",
        "driver msgs/version": f"{np.median([v.driver_calls for v in r.versions]):.0f}",
        "heartbeat msgs/s": f"{r.pings_per_s:.1f}",
        "heartbeat B/s": f"{r.heartbeat_bytes_per_s:.0f}",
        "frag/s in": f"{r.fragments_per_s:.0f}",
        "batches/s": f"{r.batches_per_s:.2f}",
        "KB/fragment": f"{r.fragment_bytes / 1024:.1f}",
        "MB/batch": f"{r.bytes_per_batch / MB:.2f}",
        "peak RSS MB PS/agg/host/hosts": "/".join(f"{r.rss_mb.get(k, 0):.0f}" for k in
                                               ("param_server", "aggregator", "hosts", "hosts_total")),
        "accounting": ("ok" if r.account["ok"] else "MISMATCH") + f" ({r.account['sent']} sent)",
    }


def table(rows: list[dict[str, str]]) -> str:
    if not rows:
        return "(no rows)\n"
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(r.get(k, "") for k in keys) + " |" for r in rows]
    return "\n".join(lines) + "\n"


# --- command line ---

def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tests.scale.swarm", description=__doc__.split("\n\n")[0])
    p.add_argument("--local", action="store_true", help="this machine, no namespaces")
    p.add_argument("--nodes", type=int, default=8, help="namespace nodes (without --local)")
    p.add_argument("--runners", "-n", type=int, nargs="+", default=[10], help="N (several: a sweep)")
    p.add_argument("--model-mb", type=float, nargs="+", default=[1.0])
    p.add_argument("--fragment-rate", type=float, nargs="+", default=[1.0],
                   help="fragments a second per sim")
    p.add_argument("--fragment-kb", type=float, default=4.0)
    p.add_argument("--versions", type=int, default=5)
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--hosts", type=int, default=0, help="swarm host processes (0: one per 100 sims)")
    p.add_argument("--aggregators", type=int, default=1, help="per node (local: in all)")
    p.add_argument("--relay", action="store_true", help="one weight relay per node")
    p.add_argument("--kill-fraction", type=float, default=0.0)
    p.add_argument("--minutes", type=float, default=0.0)
    p.add_argument("--subscribe-timeout", type=float, default=900.0,
                   help="seconds to wait for every sim to subscribe before measuring anyway")
    p.add_argument("--sweep", choices=("n-model", "rate"), default=None,
                   help="n-model: N in 10,100,1000(,2000) x 1/10/100 MB; rate: 1/10/50 per sim")
    p.add_argument("--out", type=Path, default=None, help="append the tables (markdown) here")
    p.add_argument("--json", type=Path, default=None, help="write every result here")
    return p


def configs(args: argparse.Namespace) -> list[SwarmConfig]:
    runners, models, rates = args.runners, args.model_mb, args.fragment_rate
    if args.sweep == "n-model":
        runners, models = [10, 100, 1000, 2000], [1.0, 10.0, 100.0]
    elif args.sweep == "rate":
        rates = [1.0, 10.0, 50.0]
    base = dict(versions=args.versions, interval=args.interval, fragment_kb=args.fragment_kb,
                hosts=args.hosts, aggregators=args.aggregators, relay=args.relay,
                nodes=0 if args.local else args.nodes, kill_fraction=args.kill_fraction,
                minutes=args.minutes, subscribe_timeout=args.subscribe_timeout)
    return [SwarmConfig(runners=n, model_mb=m, fragment_rate=r, **base)
            for n in runners for m in models for r in rates]


async def _main(args: argparse.Namespace) -> int:
    results, rows, ok = [], [], True
    for cfg in configs(args):
        why = fits(cfg)
        if why is not None:
            print(f"skipped: {why}", flush=True)
            continue
        print(f"run: N={cfg.runners} model={cfg.model_mb:g} MB rate={cfg.fragment_rate:g}/s "
              f"relay={cfg.relay} nodes={cfg.nodes or 'local'}", flush=True)
        if cfg.local:
            result = await run_swarm(cfg)
        else:
            from tests.scale.netns import run_on_nodes

            result = await run_on_nodes(cfg)
        for note in result.notes:
            print(f"  note: {note}")
        print(f"  account: {json.dumps(result.account)}", flush=True)
        ok &= bool(result.account["ok"])
        results.append(result)
        rows.append(result_row(result))
        print(table(rows[-1:]), flush=True)  # each row as it comes (a long sweep may be cut)
    text = table(rows)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("a") as f:
            f.write(f"\n<!-- {' '.join(sys.argv)} -->\n{text}")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], default=str, indent=1))
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(_main(_parser().parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
