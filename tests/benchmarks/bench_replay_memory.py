"""Memory over a long run once the replay buffers are full: APEX on CartPole (runners, two
shard processes, the learner actor in the driver), the RSS of every process of the run every
``--every`` seconds; per role the first figure after the fill, the least, the most and the
last, and last / first. Goal (issue 18): no growth once the buffer is full.

``python -m tests.benchmarks.bench_replay_memory [--minutes 30] [--capacity 20000]``
Measured, never asserted. A small buffer fills within the first minutes (the ring's pages are
then all touched); what could still grow is everything around it: queues, priorities, stats.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import psutil

from . import children

EXAMPLE = Path(__file__).resolve().parents[2] / "rlmesh" / "tuned_examples" / "cartpole-apex.yaml"


def role(proc: psutil.Process, root_pid: int) -> str:
    """'driver' or the actor's name from its spec file (``.../procs/.env_runner-1.spec``)."""
    if proc.pid == root_pid:
        return "driver"
    spec = next((a for a in proc.cmdline() if a.endswith(".spec")), None)
    return Path(spec).name.removeprefix(".").removesuffix(".spec") if spec else proc.name()


def sample(root: psutil.Process) -> dict[str, float]:
    """RSS in MB of the run's processes by role (a restarted actor keeps its role)."""
    out = {}
    for proc in [root, *root.children(recursive=True)]:
        try:
            out[role(proc, root.pid)] = proc.memory_info().rss / 2**20
        except psutil.Error:  # gone between the listing and the read
            pass
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--capacity", type=int, default=20_000, help="transitions, over the shards")
    ap.add_argument("--every", type=float, default=30.0, help="seconds between samples")
    ap.add_argument("--fill-s", type=float, default=120.0, help="seconds left out as the fill")
    args = ap.parse_args(argv)
    seconds = 60 * args.minutes + args.fill_s
    rb = {"type": "MultiAgentPrioritizedReplayBuffer", "capacity": args.capacity,
          "prioritized_replay_alpha": 0.6, "prioritized_replay_beta": 0.4,
          "worker_side_prioritization": True}
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "rlmesh.cli.main", "train", "-f", str(EXAMPLE), "--seed", "0",
               "--stop", json.dumps({"time_total_s": seconds}), "--local-dir", tmp,
               "--config", json.dumps({"replay_buffer_config": rb})]
        proc = children.popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        root, start = psutil.Process(proc.pid), time.monotonic()
        series: dict[str, list[float]] = defaultdict(list)
        loads = []
        while proc.poll() is None:
            now = time.monotonic() - start
            if now >= args.fill_s:
                for name, mb in sample(root).items():
                    series[name].append(mb)
                loads.append(os.getloadavg()[0])
            time.sleep(args.every)
        stderr = proc.stderr.read() if proc.stderr else ""
        if proc.wait() != 0:
            print(stderr[-2000:], file=sys.stderr)
            return 1
        rows = json.loads(next(Path(tmp).glob("*/*/result.json")).read_text().splitlines()[-1])
    print(f"APEX CartPole, capacity {args.capacity}, {args.minutes:g} min after a "
          f"{args.fill_s:g} s fill; {rows['timesteps_total']} env steps; load "
          f"{min(loads):.1f}-{max(loads):.1f}")
    print(f"{'process':<16} {'samples':>7} {'first MB':>9} {'min':>7} {'max':>7} {'last':>7} "
          f"{'last/first':>10}")
    for name, mbs in sorted(series.items()):
        print(f"{name:<16} {len(mbs):>7} {mbs[0]:>9.1f} {min(mbs):>7.1f} {max(mbs):>7.1f} "
              f"{mbs[-1]:>7.1f} {mbs[-1] / mbs[0]:>9.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
