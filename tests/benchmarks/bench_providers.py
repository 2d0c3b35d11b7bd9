"""How long each node provider takes to give a job its agents, on three network-namespace
nodes of this machine with a real Slurm (tests/cluster's fixtures; needs root):

    sudo .venv/bin/python -m tests.benchmarks.bench_providers [--repeats 3]

For each provider, the same PPO job (3 runners, CartPole, 2 iterations): seconds from the
launch's start to its placement table (every agent up and joined, the job placed) and to its
end, median of the repeats, and the ratio to SSH, measured in the same run:
- ssh: `rlmesh launch` here, agents over SSH (the reference);
- slurm: `salloc -N 3 rlmesh launch` here, agents by one srun step that join the head;
- torchrun: `torchrun --nnodes=3 --nproc-per-node=1 -m rlmesh launch` in each node.
Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

JOB = ('[job]\nrun = "PPO"\nenv = "CartPole-v1"\nlocal_dir = "{tmp}/results"\n'
       'stop = {{ training_iteration = 2 }}\nconfig = {{ num_env_runners = 3, '
       'num_envs_per_env_runner = 2, train_batch_size = 1200, minibatch_size = 128, '
       'num_epochs = 2, seed = 0 }}\n')
RLMESH = [sys.executable, "-m", "rlmesh"]


def timed(argvs: list[list[str]], env: dict[str, str], wrap=None) -> tuple[float, float]:
    """Start every argv at once; (s to the first placement line any prints, s to all ends)."""
    start = time.monotonic()
    placed: list[float] = []
    procs = [subprocess.Popen(wrap(i, a) if wrap else a, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              start_new_session=True) for i, a in enumerate(argvs)]
    lines: list[str] = []

    def read(p: subprocess.Popen[bytes]) -> None:
        assert p.stdout is not None
        for raw in p.stdout:
            line = raw.decode("utf-8", "replace")
            lines.append(line)
            if line.startswith("rlmesh: placement of") and not placed:
                placed.append(time.monotonic() - start)
    readers = [threading.Thread(target=read, args=(p,), daemon=True) for p in procs]
    for r in readers:
        r.start()
    codes = [p.wait(timeout=600) for p in procs]
    for r in readers:
        r.join(5)
    if any(codes) or not placed:
        raise RuntimeError(f"exit codes {codes}:\n{''.join(lines[-40:])}")
    return placed[0], time.monotonic() - start


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    from tests.cluster.conftest import start_cluster
    from tests.cluster.slurm_cluster import start_slurm

    nodes = start_cluster(3)
    try:
        slurm = start_slurm(nodes)
        try:
            results = run(nodes, slurm, args.repeats)
        finally:
            slurm.down()
    finally:
        nodes.down()
    ref = statistics.median(results["ssh"][0])
    print(f"\n{'provider':<10} {'to placement s':>15} {'to end s':>10} {'placement / ssh':>16}")
    for name, (to_place, to_end) in results.items():
        print(f"{name:<10} {statistics.median(to_place):>15.2f} {statistics.median(to_end):>10.2f} "
              f"{statistics.median(to_place) / ref:>16.2f}x")


def run(nodes, slurm, repeats: int) -> dict[str, tuple[list[float], list[float]]]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-providers-"))
    env = {**slurm.env, "RLMESH_CLUSTERS_DIR": str(tmp / "clusters"), "PYTHONUNBUFFERED": "1"}
    entries = "\n".join(f'[[nodes]]\nname = "{n.netns}"\nhost = "{n.address}"\n'
                        "resources = { CPU = 2 }\n" for n in nodes.nodes.values())
    files = {
        "ssh": (f'cluster_name = "bp-ssh"\n[ssh]\nuser = "root"\nidentity_file = '
                f'"{nodes.identity_file}"\nknown_hosts = "{nodes.known_hosts}"\n'
                f'python = "{sys.executable}"\n[head]\nhost = "{nodes.bridge_address}"\n{entries}\n'),
        "slurm": f'cluster_name = "bp-slurm"\nprovider = "slurm"\n[slurm]\nnodes = 3\n'
                 f'python = "{sys.executable}"\n',
        "torchrun": 'cluster_name = "bp-torchrun"\nprovider = "torchrun"\n',
    }
    paths = {}
    for name, head in files.items():
        paths[name] = tmp / f"{name}.toml"
        paths[name].write_text(head + JOB.format(tmp=tmp / name))
    master = nodes.nodes["node1"].address
    names = list(nodes.nodes)

    def in_node(i: int, argv: list[str]) -> list[str]:
        ns = nodes.nodes[names[i]].netns
        return ["ip", "netns", "exec", ns, "unshare", "--uts", "sh", "-c",
                'echo "$1" > /proc/sys/kernel/hostname && shift && exec "$@"', "sh", ns, *argv]

    out: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in files}
    for r in range(repeats):
        for name in files:
            if name == "ssh":
                got = timed([[*RLMESH, "launch", str(paths[name])]], env)
            elif name == "slurm":
                got = timed([["salloc", "-N", "3", "--cpus-per-task=2", *RLMESH, "launch",
                              str(paths[name])]], env)
            else:
                argv = [[sys.executable, "-m", "torch.distributed.run", "--nnodes=3",
                         "--nproc-per-node=1", f"--node-rank={i}", f"--master-addr={master}",
                         f"--master-port={29600 + r}", "-m", "rlmesh", "launch",
                         str(paths[name])] for i in range(3)]
                got = timed(argv, env, in_node)
            out[name][0].append(got[0])
            out[name][1].append(got[1])
            print(f"repeat {r + 1} {name}: placement {got[0]:.2f} s, end {got[1]:.2f} s",
                  flush=True)
    return out


if __name__ == "__main__":
    if os.geteuid() != 0:
        sys.exit("bench_providers needs root (network namespaces, Slurm's daemons)")
    main()
