"""The swarm on network-namespace nodes: M nodes made with deploy/netns-cluster.sh (as the
cluster tests make theirs), a real ``ClusterSession`` (CURVE keys, an agent per node over
real SSH) and its head ``Job`` on the bridge address, in which ``run_swarm`` places the
relays, aggregators and hosts per node. Every node is this machine (its processes share the
two cores and one clock), so times are the control plane's on two cores; bytes and
message counts are what the design is judged by. Needs root."""

from __future__ import annotations

import secrets
import sys
from pathlib import Path
from typing import Any

from rlmesh.launcher.cluster_config import parse_cluster
from rlmesh.launcher.session import ClusterSession
from rlmesh.runtime.run_dir import runs_root
from tests.cluster.conftest import NetnsCluster, run_script, unavailable_reason
from tests.scale.swarm import SwarmConfig, SwarmResult, run_swarm

PREFIX = "sw"  # + 4 hex digits: the script allows 10 characters


def cluster_data(cluster: NetnsCluster, name: str) -> dict[str, Any]:
    """The cluster file's contents for ``cluster``'s nodes; the head is the bridge address."""
    return {
        "cluster_name": name,
        "ssh": {"user": cluster.user, "identity_file": str(cluster.identity_file),
                "known_hosts": str(cluster.known_hosts), "connect_timeout_s": 5,
                "python": sys.executable},
        "head": {"host": cluster.bridge_address},
        # Required by the file's format; the swarm's driver is this process, no job is run.
        "job": {"script": str(Path(__file__).with_name("swarm.py"))},
        "nodes": [{"name": n, "host": node.address, "resources": {"CPU": 2, "GPU": 0}}
                  for n, node in cluster.nodes.items()],
    }


async def run_on_nodes(cfg: SwarmConfig, echo: Any = print) -> SwarmResult:
    """``run_swarm(cfg)`` on ``cfg.nodes`` namespace nodes, made here and taken down after."""
    why = unavailable_reason()
    if why is not None:
        raise SystemExit(f"namespace nodes unavailable: {why} (use --local)")
    prefix = PREFIX + secrets.token_hex(2)
    run_script("up", str(cfg.nodes), "--prefix", prefix, timeout=300)
    session = None
    try:
        cluster = NetnsCluster(prefix)
        session = ClusterSession(parse_cluster(cluster_data(cluster, prefix), "<swarm>"),
                                 echo=lambda line: None)
        session.prepare()
        job = await session.start()
        node_dirs = [runs_root() / f"{job.job_id}-{n}" for n in cluster.names]
        return await run_swarm(cfg, job=job, nodes=cluster.names, node_dirs=node_dirs, echo=echo)
    finally:
        if session is not None:
            await session.shutdown()
            session.close()
        run_script("down", "--prefix", prefix, check=False, timeout=120)
