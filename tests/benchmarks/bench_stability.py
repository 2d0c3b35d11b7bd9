"""Stability after convergence: each tuned example trained to 4x the env steps it needs to
reach its threshold, several seeds; per seed the mean of ``episode_reward_mean`` over the
last quarter of the run. Goal: the minimum over seeds >= 0.9x the threshold.

``python -m tests.benchmarks.bench_stability [--only ppo,impala,appo] [--seeds 0 1 2 3 4]
[--config JSON] [--curve]`` (``--config`` goes to every ``rlmesh train``: to try settings;
``--curve`` prints each run's return, entropy and policy lag every few iterations).
Measured, never asserted. A run stops only on its step budget (the example's return stop is
replaced), so a policy that collapses after reaching the threshold shows.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# example -> (threshold, env steps it needs to reach it: the slowest seed in
# docs/benchmarks.md, rounded up). The budget is 4x that.
EXAMPLES: dict[str, tuple[str, float, int]] = {
    "ppo": ("cartpole-ppo.yaml", 450.0, 120_000),
    "impala": ("cartpole-impala.yaml", 450.0, 700_000),
    "appo": ("cartpole-appo.yaml", 450.0, 600_000),
    "pg": ("cartpole-pg.yaml", 450.0, 250_000),
    "a2c": ("cartpole-a2c.yaml", 450.0, 200_000),
    "a3c": ("cartpole-a3c.yaml", 450.0, 250_000),
}


def run_train(args: list[str], local_dir: Path, config: str | None = None
              ) -> tuple[list[dict[str, Any]], float]:
    """``rlmesh train *args --local-dir local_dir [--config config]`` in a process of its
    own: every result row and the wall time (bench_defaults and bench_ppo_envs use it too)."""
    cmd = [sys.executable, "-m", "rlmesh.cli.main", "train", *args, "--local-dir", str(local_dir)]
    if config:
        cmd += ["--config", config]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    rows = [json.loads(line) for line in
            next(local_dir.glob("*/*/result.json")).read_text().splitlines()]
    return rows, wall


def train(example: str, seed: int, budget: int, config: str | None, tmp: Path
          ) -> tuple[list[dict[str, Any]], float]:
    """``rlmesh train -f example --seed seed`` to ``budget`` env steps: every result row and
    the wall time."""
    return run_train(["-f", example, "--seed", str(seed), "--stop",
                      json.dumps({"timesteps_total": budget})],
                     tmp / f"{Path(example).stem}-{seed}", config)


def learner_stat(row: dict[str, Any], key: str) -> float:
    stats = row.get("info", {}).get("learner", {}).get("default_policy", {})
    return float(stats.get(key, float("nan")))


def kl(row: dict[str, Any]) -> float:
    """The KL a result reports: between behaviour and trained policy (IMPALA, APPO) or of the
    update (PPO)."""
    value = learner_stat(row, "behaviour_kl")
    return value if value == value else learner_stat(row, "mean_kl_loss")


def last_quarter_mean(rows: list[dict[str, Any]], budget: int) -> float:
    """Mean return over the results of the last quarter of the env-step budget."""
    tail = [r["episode_reward_mean"] for r in rows if r["timesteps_total"] >= 0.75 * budget]
    return sum(tail) / len(tail) if tail else float("nan")


def first_reaching(rows: list[dict[str, Any]], threshold: float) -> int | None:
    return next((r["timesteps_total"] for r in rows if r["episode_reward_mean"] >= threshold),
                None)


def print_curve(rows: list[dict[str, Any]], every: int) -> None:
    for r in rows[::every]:
        print(f"    {r['timesteps_total']:>9,}  return {r['episode_reward_mean']:6.1f}  "
              f"entropy {learner_stat(r, 'entropy'):.3f}  kl {kl(r):.4f}  "
              f"lag {r.get('policy_lag_mean', 0):.1f}", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="ppo,impala,appo")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--config", help="JSON overrides for every run")
    p.add_argument("--curve", action="store_true", help="print each run's curve")
    args = p.parse_args(argv)
    print("| example | seed | budget | first >= threshold | last-quarter mean | min entropy "
          "| s process |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    summary = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only.split(","):
            example, threshold, needs = EXAMPLES[name]
            budget, means = 4 * needs, []
            for seed in args.seeds:
                rows, wall = train(example, seed, budget, args.config, Path(tmp))
                means.append(last_quarter_mean(rows, budget))
                first = first_reaching(rows, threshold)
                entropy = min(learner_stat(r, "entropy") for r in rows)
                print(f"| {example} | {seed} | {budget:,} | "
                      f"{f'{first:,}' if first else 'never'} | {means[-1]:.1f} | "
                      f"{entropy:.3f} | {wall:.1f} |", flush=True)
                if args.curve:
                    print_curve(rows, max(1, len(rows) // 20))
            worst = min(means)
            summary.append(f"{example}: min over seeds {worst:.1f} = {worst / threshold:.2f}x "
                           f"the threshold {threshold:g} (goal >= 0.90x)")
    print("\n" + "\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
