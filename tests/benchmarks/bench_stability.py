"""Stability after convergence: each tuned example trained to 4x what it needs to reach its
threshold (env steps; training iterations for the offline ones), several seeds; per seed the
mean of its return metric over the last quarter of the run. Goal: the minimum over seeds
>= 0.9x the threshold (for a negative threshold: >= threshold / 0.9, e.g. -200 -> -222.2).

``python -m tests.benchmarks.bench_stability [--only pg,a2c|all] [--seeds 0 1 2 3 4]
[--config JSON] [--curve] [--budget N] [--log FILE] [--data DIR]`` (``--config`` goes to
every ``rlmesh train``: to try settings; ``--curve`` prints each run's return, entropy and
policy lag every few iterations; ``--budget`` replaces 4x the needs, for a smoke run).
The examples and their thresholds: tests/benchmarks/stability_examples.py. Measured, never
asserted. A run stops only on its budget (the example's return stop is replaced), so a policy
that collapses after reaching the threshold shows.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import children
from .stability_examples import (DEFAULT_ORDER, EXAMPLES, GOAL, Example, bar, curve_lines,
                                 first_reaching, last_quarter_mean, min_entropy, score)

OFFLINE_DATA_STEPS = 50_000  # RLlib's recipe, as the offline examples' comments say


def run_train(args: list[str], local_dir: Path, config: str | None = None
              ) -> tuple[list[dict[str, Any]], float]:
    """``rlmesh train *args --local-dir local_dir [--config config]`` in a process of its
    own: every result row and the wall time (bench_defaults and bench_ppo_envs use it too)."""
    cmd = [sys.executable, "-m", "rlmesh.cli.main", "train", *args, "--local-dir", str(local_dir)]
    if config:
        cmd += ["--config", config]
    start = time.perf_counter()
    proc = children.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    rows = [json.loads(line) for line in
            next(local_dir.glob("*/*/result.json")).read_text().splitlines()]
    return rows, wall


def offline_data(directory: Path) -> Path:
    """The offline examples' dataset, written once: what PPO's runners sample in 50k env
    steps of `cartpole-ppo.yaml --seed 0` as complete episodes (the examples' recipe)."""
    if not any(directory.glob("*.json")):
        overrides = {"batch_mode": "complete_episodes", "output": str(directory)}
        run_train(["-f", "cartpole-ppo.yaml", "--seed", "0", "--stop",
                   json.dumps({"timesteps_total": OFFLINE_DATA_STEPS})],
                  directory.parent / f"{directory.name}-run", json.dumps(overrides))
    return directory


def train(ex: Example, seed: int, budget: int, config: str | None, tmp: Path,
          data: Path | None) -> tuple[list[dict[str, Any]], float]:
    """``rlmesh train -f example --seed seed`` to ``budget`` (in the example's unit): every
    result row and the wall time."""
    overrides = json.loads(config) if config else {}
    if ex.offline:
        overrides.setdefault("input", str(data))
    return run_train(["-f", ex.file, "--seed", str(seed), "--stop",
                      json.dumps({ex.unit: budget})],
                     tmp / f"{Path(ex.file).stem}-{seed}",
                     json.dumps(overrides) if overrides else None)


class Log:
    """Prints and appends every line to a file as it comes, so a killed run loses nothing."""

    def __init__(self, path: str | None):
        self.path = path

    def __call__(self, line: str = "") -> None:
        print(line, flush=True)
        if self.path:
            with open(self.path, "a") as f:
                f.write(line + "\n")


def measure(name: str, ex: Example, args, tmp: Path, log: Log) -> str:
    """Every seed of one example, one row each; the example's summary row."""
    if ex.needs is None and args.budget is None:
        return (f"| {ex.file} | - | never reaches {ex.threshold:g} ({ex.source}) | - | - | - "
                f"| not measured |")
    budget = args.budget or 4 * ex.needs
    data = offline_data(Path(args.data or tmp / "offline-data")) if ex.offline else None
    means, firsts = [], []
    for seed in args.seeds:
        rows, wall = train(ex, seed, budget, args.config, tmp, data)
        means.append(last_quarter_mean(rows, ex, budget))
        firsts.append(first_reaching(rows, ex))
        first = f"{firsts[-1]:,}" if firsts[-1] is not None else "never"
        log(f"| {name} | {seed} | {budget:,} | {first} | {means[-1]:.1f} | {min_entropy(rows)} "
            f"| {wall:.1f} |")
        if args.curve:
            for line in curve_lines(rows, ex, max(1, len(rows) // 20)):
                log(line)
    return summary_row(ex, budget, firsts, means)


def summary_row(ex: Example, budget: int, firsts: list, means: list[float]) -> str:
    reached = [f for f in firsts if f is not None]
    when = (f"{len(reached)} of {len(firsts)}: {min(reached):,}-{max(reached):,}" if reached
            else f"0 of {len(firsts)}")
    worst = min(means)
    met = worst >= bar(ex.threshold)
    unit = "env steps" if ex.unit == "timesteps_total" else "iterations"
    return (f"| {ex.file} | {ex.threshold:g} ({ex.metric}) | {budget:,} {unit} | {when} | "
            f"{', '.join(f'{m:.1f}' for m in means)} | **{score(worst, ex.threshold):.2f}x** "
            f"(bar {bar(ex.threshold):.1f}) | {'met' if met else 'missed'} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="ppo,impala,appo",
                   help=f"comma-separated names, or all ({','.join(DEFAULT_ORDER)}); "
                        f"every name: {','.join(EXAMPLES)}")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--config", help="JSON overrides for every run")
    p.add_argument("--curve", action="store_true", help="print each run's curve")
    p.add_argument("--budget", type=int, help="budget in the example's unit (default 4x needs)")
    p.add_argument("--log", help="append every line printed to this file")
    p.add_argument("--data", help="offline dataset directory (written there if empty)")
    args = p.parse_args(argv)
    names = DEFAULT_ORDER if args.only == "all" else args.only.split(",")
    unknown = [n for n in names if n not in EXAMPLES]
    if unknown:
        p.error(f"unknown example {unknown}; known: {','.join(EXAMPLES)}")
    log = Log(args.log)
    log(f"# bench_stability --only {','.join(names)} --seeds {' '.join(map(str, args.seeds))}"
        f"{' --config ' + args.config if args.config else ''}; load {os.getloadavg()[0]:.1f}; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; goal: min over seeds >= "
        f"{GOAL}x the threshold (negative: >= threshold / {GOAL})")
    log("| example | seed | budget | first >= threshold | last-quarter mean | min entropy "
        "| s process |")
    log("|---|---:|---:|---:|---:|---:|---:|")
    summary = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            summary.append(measure(name, EXAMPLES[name], args, Path(tmp), log))
    log(f"\n# load {os.getloadavg()[0]:.1f}; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    log("| example | threshold (metric) | budget | seeds reaching it, when | last-quarter "
        "mean per seed | min / threshold | goal |")
    log("|---|---|---:|---|---|---:|---|")
    for row in summary:
        log(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
