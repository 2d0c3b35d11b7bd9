"""Run the benchmarks and print a table, plus a markdown block for docs/benchmark_log.md.

``python -m tests.benchmarks.run [--quick] [--only NAME[,NAME]] [--json FILE] [--seeds S ...]``
Figures are measured, never asserted: a missed goal is reported, not failed.
The suites: the runtime's (bench_runtime: rtt_*, stream_*, cold_start, about 1 min),
PPO's (bench_ppo: ppo_*, about 5 min; ``--only ppo``) and the policy client's (bench_client:
client_*, about 1 min; ``--only client``), the scheduler's (bench_scheduler: scheduler_*,
simulated, no processes, under 1 min; ``--only scheduler``) and IMPALA's (bench_impala:
impala_*, about 8 min with RLlib's learning runs; ``--only impala``) and CURVE's cost
(bench_curve: curve_*, plain tcp vs CURVE, about 1 min; ``--only curve``), DQN's
(bench_dqn: dqn_replay, dqn_learning, dqn_eval against stable-baselines3; ``--only dqn``) and
SAC/TD3/DDPG's (bench_sac_td3: sac_td3_learning against stable-baselines3, several minutes;
``--only sac_td3``), APEX's (bench_apex: apex_throughput beside synchronous DQN, about
4 min, apex_local_shard, one shard in the driver vs a shard process, about 6 min;
``--only apex``), sweeps' (bench_tune: tune_overhead, tune_ppo_sweep, about 3 min;
``--only tune``) and ``rlmesh train``'s start-up and shut-down (bench_startup: startup,
PPO, IMPALA and DQN to one iteration beside a bare torch import, about 2 min;
``--only startup``), SimpleQ's and Rainbow DQN's against RLlib's CartPole budgets
(bench_rainbow: rainbow_learning, 3 seeds each, tens of minutes; ``--only rainbow``), PPO on
Pong against its limits and Sample Factory, CleanRL and RLlib (bench_atari: atari_throughput,
about 15 min with the peers of ``make bench-peers``; ``--only atari``).
Each suite has its own sizes.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import (bench_apex, bench_atari, bench_client, bench_curve, bench_dqn, bench_impala,
               bench_ppo, bench_rainbow, bench_runtime, bench_sac_td3, bench_scheduler,
               bench_startup, bench_tune, bench_vector)
from .bench_runtime import Row

# name -> (benchmark, its suite's default sizes, its suite's --quick sizes)
BENCHMARKS: dict[str, tuple[Any, Any, Any]] = {
    name: (fn, suite.DEFAULT, suite.QUICK)
    for suite in (bench_runtime, bench_ppo, bench_client, bench_scheduler, bench_impala,
                  bench_curve, bench_dqn, bench_rainbow, bench_sac_td3, bench_apex, bench_tune,
                  bench_startup, bench_atari, bench_vector)
    for name, fn in suite.BENCHMARKS.items()}


def _version(dist: str) -> str:
    """A package's version without importing it (torch must stay out of this process)."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def machine() -> dict[str, Any]:
    import msgpack
    import numpy
    import uvloop
    import zmq

    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cpus": cpus, "cpu_model": cpu, "os": platform.platform(),
        "python": platform.python_version(), "pyzmq": zmq.__version__,
        "libzmq": zmq.zmq_version(), "msgpack": ".".join(map(str, msgpack.version)),
        "numpy": numpy.__version__, "uvloop": uvloop.__version__,
        "torch": _version("torch"), "gymnasium": _version("gymnasium"),
    }


def revision() -> str:
    """The commit measured, marked when the working tree differs from it."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, text=True,
                              capture_output=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "rlmesh"],
                               cwd=root, text=True, capture_output=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" + uncommitted changes in rlmesh/" if dirty else "")


def _fmt(value: float) -> str:
    if value != value:  # nan: no figure (a reference not installed)
        return "–"
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}" if value >= 1 else f"{value:.3f}"


def _goal(row: Row) -> str:
    if hasattr(row, "goal_text"):  # absolute goals (bench_ppo.PPORow)
        return row.goal_text()
    if row.goal is None:
        return ""
    return f"{'≥' if row.higher_is_better else '≤'} {row.goal:g}x: {row.verdict}"


HEADER = ["benchmark", "metric", "rlmesh", "reference", "rlmesh/ref", "goal", "reference is"]


def cells(row: Row) -> list[str]:
    ratio = "–" if row.ratio != row.ratio else f"{row.ratio:.2f}x"
    return [row.bench, row.metric, _fmt(row.rlmesh), _fmt(row.reference), ratio,
            _goal(row), row.peer]


def text_table(rows: list[Row]) -> str:
    table = [HEADER, *(cells(r) for r in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(HEADER))]
    right = {2, 3, 4}
    out = []
    for n, line in enumerate(table):
        out.append("  ".join(c.rjust(w) if i in right else c.ljust(w)
                             for i, (c, w) in enumerate(zip(line, widths))).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"


def markdown_table(rows: list[Row], info: dict[str, Any], date: str, quick: bool,
                   load: tuple[str, str]) -> str:
    lines = [
        f"Measured {date} on {info['cpus']} CPUs ({info['cpu_model']}), Python {info['python']}, "
        f"pyzmq {info['pyzmq']} / libzmq {info['libzmq']}, torch {info['torch']}, "
        f"gymnasium {info['gymnasium']}{', --quick' if quick else ''}; "
        f"load average (1/5/15 min) {load[0]} before, {load[1]} after; code {info['code']}.",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "|".join(["---", "---", "---:", "---:", "---:", "---", "---"]) + "|",
    ]
    lines += ["| " + " | ".join(cells(r)) + " |" for r in rows]
    return "\n".join(lines)


def select(only: str | None) -> list[str]:
    if not only:
        return list(BENCHMARKS)
    wanted = [w.strip() for w in only.split(",") if w.strip()]
    names = [n for n in BENCHMARKS if any(n == w or n.startswith(w) for w in wanted)]
    if not names:
        raise SystemExit(f"--only {only!r} matches none of: {', '.join(BENCHMARKS)}")
    return names


def leftover_children() -> list[str]:
    """Processes this run started that are still alive (there should be none)."""
    import psutil

    left = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                left.append(f"{p.pid} {' '.join(p.cmdline()[:4])}")
        except psutil.NoSuchProcess:
            pass  # exited while we looked
    return left


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.run",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="fewer iterations: runtime about 20 s instead of about 1 min, "
                             "PPO about 1.5 min instead of about 5")
    parser.add_argument("--only", metavar="NAME", help="comma-separated names or prefixes: "
                        + ", ".join(BENCHMARKS))
    parser.add_argument("--json", metavar="FILE", help="also write the rows and the machine here")
    parser.add_argument("--seeds", type=int, nargs="+", metavar="S",
                        help="the seeds of the learning benchmarks (PPO, IMPALA, DQN, SAC/TD3; "
                             "default: each suite's own, 0 1 2 for most); ten tell more than three")
    args = parser.parse_args(argv)
    names = select(args.only)
    info = {**machine(), "code": revision()}
    date = time.strftime("%Y-%m-%d")
    print(f"rlmesh benchmarks, {date}: {', '.join(names)}{' (quick)' if args.quick else ''}")
    print("machine: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    load_before = _load()
    print(f"load average: {load_before} (other work on the machine skews every figure)", flush=True)

    tmp = Path(tempfile.mkdtemp(prefix="rlb-"))  # short: ipc paths must stay < 108 bytes
    os.environ["RLMESH_RUNS_ROOT"] = str(tmp / "runs")
    rows: list[Row] = []
    timings: dict[str, float] = {}
    try:
        for name in names:
            t0 = time.perf_counter()
            fn, default, quick = BENCHMARKS[name]
            sizes = quick if args.quick else default
            if args.seeds and dataclasses.is_dataclass(sizes) and hasattr(sizes, "seeds"):
                sizes = dataclasses.replace(sizes, seeds=tuple(args.seeds))
            new = fn(sizes, tmp)
            timings[name] = time.perf_counter() - t0
            rows += new
            print(f"\n{name} ({timings[name]:.1f} s)\n{text_table(new)}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        left = leftover_children()
        if left:
            print("WARNING: processes still running after the benchmarks:\n  " + "\n  ".join(left),
                  file=sys.stderr)

    load = (load_before, _load())
    print(f"\nall ({sum(timings.values()):.1f} s; load average after: {load[1]})")
    print(text_table(rows))
    print("\n<!-- paste into docs/benchmark_log.md -->")
    print(markdown_table(rows, info, date, args.quick, load))
    if args.json:
        Path(args.json).write_text(json.dumps({
            "date": date, "quick": args.quick, "machine": info, "seconds": timings,
            "load_average": {"before": load[0], "after": load[1]},
            "rows": [r.as_dict() for r in rows]}, indent=2) + "\n")
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
