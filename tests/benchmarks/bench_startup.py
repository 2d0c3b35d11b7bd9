"""What ``rlmesh train`` costs outside training: seconds from the process's start to its
first result, less that iteration's own time (start-up), and from its last result to its
exit (shut-down), beside a bare ``python -c "import torch, gymnasium"`` measured in the same
run (its import time, and its exit once imported). Measured, never asserted.

``python -m tests.benchmarks.bench_startup [--quick] [--repeats N] [--algos PPO,IMPALA,DQN]
[--before TREE]``: ``--before`` also runs another checkout (``git worktree add /tmp/before
REV``), in turns with this one, for an A/B of a change. ``--only startup`` in run.py.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .bench_runtime import Row

ROOT = Path(__file__).resolve().parents[2]
STOP = '{"training_iteration": 1}'  # one iteration: the run is little but its overhead
# Prints when its imports are done: start-up is up to there, shut-down after it.
BARE = "import torch, gymnasium, time; print(time.time(), flush=True)"


@dataclass(frozen=True)
class StartupSizes:
    repeats: int  # runs of each algorithm (and of the reference), in turns
    algos: tuple[str, ...]


DEFAULT = StartupSizes(repeats=5, algos=("PPO", "IMPALA", "DQN"))
QUICK = StartupSizes(repeats=3, algos=("PPO",))


def bare_reference() -> tuple[float, float]:
    """(start to imports done, imports done to exit) of a bare torch + gymnasium process."""
    t0 = time.time()
    out = subprocess.run([sys.executable, "-c", BARE], capture_output=True, text=True,
                         check=True, start_new_session=True).stdout
    end = time.time()
    imported = float(out.split()[0])
    return imported - t0, end - imported


def train_once(algo: str, tree: Path, local_dir: Path) -> dict[str, float]:
    """One ``rlmesh train --run algo --env CartPole-v1`` to one iteration from ``tree``:
    start to first result, its iteration's time, last result to exit, wall (seconds)."""
    cmd = [sys.executable, "-m", "rlmesh.cli.main", "train", "--run", algo,
           "--env", "CartPole-v1", "--stop", STOP, "--local-dir", str(local_dir)]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True,
                          start_new_session=True)
    end = time.time()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} (in {tree}) failed:\n{proc.stderr[-2000:]}")
    (results,) = local_dir.glob("*/*/result.json")
    row = json.loads(results.read_text().splitlines()[-1])
    # Written and flushed when the result came: the file's time is the result's.
    written = results.stat().st_mtime_ns / 1e9
    return {"first_result": written - t0, "iteration": row["time_this_iter_s"],
            "start_up": written - t0 - row["time_this_iter_s"], "shut_down": end - written,
            "wall": end - t0}


def measure(sizes: StartupSizes, tmp: Path, trees: dict[str, Path]) -> dict[str, dict]:
    """Every figure of ``repeats`` rounds; each round runs the reference and then every
    algorithm from every tree, the trees' order alternating."""
    figures: dict[str, dict] = {"bare": {"start_up": [], "shut_down": []}}
    for n in range(sizes.repeats):
        start_up, shut_down = bare_reference()
        figures["bare"]["start_up"].append(start_up)
        figures["bare"]["shut_down"].append(shut_down)
        names = list(trees) if n % 2 == 0 else list(reversed(trees))
        for algo in sizes.algos:
            for name in names:
                got = train_once(algo, trees[name], tmp / f"{name}-{algo}-{n}")
                for key, value in got.items():
                    figures.setdefault(f"{name}:{algo}", {}).setdefault(key, []).append(value)
    return figures


def rows(figures: dict[str, dict], name: str, algos: tuple[str, ...]) -> list[Row]:
    med = statistics.median
    bare = figures["bare"]
    peer_up = "bare python -c 'import torch, gymnasium': start to imports done"
    peer_down = "the same: imports done to exit"
    out = []
    for algo in algos:
        f = figures[f"{name}:{algo}"]
        out += [Row(f"startup {algo} CartPole", "s, start to first result less its iteration",
                    med(f["start_up"]), med(bare["start_up"]), peer_up),
                Row(f"startup {algo} CartPole", "s, last result to exit",
                    med(f["shut_down"]), med(bare["shut_down"]), peer_down)]
    return out


def bench_startup(sizes: StartupSizes, tmp: Path) -> list[Row]:
    return rows(measure(sizes, tmp, {"rlmesh": ROOT}), "rlmesh", sizes.algos)


BENCHMARKS = {"startup": bench_startup}


def _table(figures: dict[str, dict]) -> str:
    """Medians (and each run) of every figure, markdown."""
    lines = ["| what | start to first result | its iteration | start-up (first result less "
             "iteration) | last result to exit | wall |", "|---|---:|---:|---:|---:|---:|"]
    for what, f in figures.items():
        def cell(key: str) -> str:
            values = f.get(key)
            if not values:
                return ""
            each = " / ".join(f"{v:.2f}" for v in values)
            return f"**{statistics.median(values):.2f}** ({each})"
        lines.append(f"| {what} | {cell('first_result')} | {cell('iteration')} | "
                     f"{cell('start_up')} | {cell('shut_down')} | {cell('wall')} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int)
    parser.add_argument("--algos", help="comma-separated (default PPO,IMPALA,DQN)")
    parser.add_argument("--before", metavar="TREE", help="another checkout to run in turns")
    args = parser.parse_args()
    sizes = QUICK if args.quick else DEFAULT
    sizes = StartupSizes(args.repeats or sizes.repeats,
                         tuple(args.algos.split(",")) if args.algos else sizes.algos)
    trees = {"rlmesh": ROOT}
    if args.before:
        trees = {"before": Path(args.before).resolve(), "rlmesh": ROOT}
    print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    with tempfile.TemporaryDirectory(prefix="rls-") as tmp:
        os.environ.setdefault("RLMESH_RUNS_ROOT", str(Path(tmp) / "runs"))
        figures = measure(sizes, Path(tmp), trees)
    print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(_table(figures))


if __name__ == "__main__":
    main()
