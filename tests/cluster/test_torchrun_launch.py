"""`rlmesh launch` under torchrun (provider "torchrun"), one torchrun process per network-
namespace node with the node's hostname: rank 0 is the head, the other ranks' agents join it,
and PPO trains with its two data-parallel learners on two different nodes; every rank exits 0
and nothing is left. Outside torchrun, and with more than one process per node, the launch is
one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tests.cluster.conftest import NetnsCluster

TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


def cluster_file(tmp: Path, name: str, stop: dict) -> Path:
    path = tmp / f"{name}.toml"
    path.write_text(f'cluster_name = "{name}"\nprovider = "torchrun"\n\n[job]\nrun = "PPO"\n'
                    f'env = "CartPole-v1"\nlocal_dir = "{tmp / "results"}"\n'
                    f'experiment_name = "{name}"\n'
                    f"stop = {{ {', '.join(f'{k} = {v}' for k, v in stop.items())} }}\n"
                    "config = { num_learners = 2, num_cpus_per_learner = 2, num_env_runners = 2, "
                    "train_batch_size = 1200, minibatch_size = 128, num_epochs = 4, seed = 0, "
                    "lr = 0.0005 }\n")
    return path


def start_rank(nodes: NetnsCluster, node: str, rank: int, path: Path, env: dict[str, str],
               master: str, log: Path) -> subprocess.Popen[bytes]:
    """torchrun on ``node``: in its namespace, with its hostname (as on a real node)."""
    ns = nodes.nodes[node].netns
    argv = [*TORCHRUN, "--nnodes=3", "--nproc-per-node=1", f"--node-rank={rank}",
            f"--master-addr={master}", "--master-port=29511", "-m", "rlmesh", "launch", str(path)]
    script = 'echo "$1" > /proc/sys/kernel/hostname && shift && exec "$@"'
    with open(log, "wb") as out:
        return subprocess.Popen(["ip", "netns", "exec", ns, "unshare", "--uts", "sh", "-c", script,
                                 "sh", ns, *argv], env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def test_ppo_under_torchrun_with_learners_on_two_nodes(netns_cluster_factory,
                                                        tmp_path: Path) -> None:
    nodes = netns_cluster_factory(3)
    path = cluster_file(tmp_path, "trun", {"episode_reward_mean": 60, "training_iteration": 60})
    env = {**os.environ, "RLMESH_CLUSTERS_DIR": str(tmp_path / "clusters"),
           "PYTHONUNBUFFERED": "1"}
    master = nodes.nodes["node1"].address
    ranks = [start_rank(nodes, n, i, path, env, master, tmp_path / f"rank{i}.log")
             for i, n in enumerate(nodes.names)]
    try:
        for i, p in enumerate(ranks):
            code = p.wait(timeout=400)
            assert code == 0, f"rank {i} exited {code}:\n" + (tmp_path / f"rank{i}.log").read_text()[-4000:]
        head = (tmp_path / "rank0.log").read_text()
        table = [l for l in head.splitlines() if l.startswith("  node")]
        learner_nodes = {l.split()[0] for l in table if "learner-" in l}
        assert len(learner_nodes) == 2, head[-3000:]
        rows = [json.loads(l) for f in (tmp_path / "results").rglob("result.json")
                for l in f.read_text().splitlines() if l.strip()]
        assert rows and rows[-1]["episode_reward_mean"] >= 60, rows[-1:]
    finally:
        for p in ranks:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        left = [p for p in psutil.process_iter(["cmdline"])
                if str(path) in " ".join(p.info["cmdline"] or [])
                or "torchrun-trun" in " ".join(p.info["cmdline"] or [])]
        if not left:
            break
        time.sleep(0.3)
    assert not left, [p.info["cmdline"] for p in left]


def test_outside_torchrun_and_several_processes_a_node_are_one_line(tmp_path: Path) -> None:
    path = cluster_file(tmp_path, "trbad", {"training_iteration": 1})
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE")}
    env["RLMESH_CLUSTERS_DIR"] = str(tmp_path / "clusters")
    done = subprocess.run([sys.executable, "-m", "rlmesh", "launch", str(path)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith(
        "rlmesh launch: error: provider 'torchrun' runs under torchrun"), done.stderr
    done = subprocess.run([sys.executable, "-m", "rlmesh", "launch", str(path)], env={
        **env, "RANK": "1", "WORLD_SIZE": "4", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500",
        "LOCAL_WORLD_SIZE": "2"}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "LOCAL_WORLD_SIZE is 2: run one rlmesh process per node" in done.stderr
