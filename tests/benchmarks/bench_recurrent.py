"""Recurrent PPO on memory tasks: rlmesh's tuned examples for CartPole and Pendulum without
velocities (``stateless-cartpole-ppo.yaml`` to 475, ``stateless-pendulum-ppo.yaml`` to -200)
against sb3-contrib's RecurrentPPO with rl-zoo's hyperparameters for ``CartPoleNoVel-v1`` and
``PendulumNoVel-v1`` (``peer_sb3_recurrent.py``), taking turns per seed in the same run; then
PPO's defaults with nothing but ``use_lstm`` set, on the CartPole task, against three times
RecurrentPPO's budget. Env steps and seconds to the threshold, as markdown.

``python -m tests.benchmarks.bench_recurrent [--only cartpole,pendulum,defaults]
[--seeds 0 1 2] [--peer-python PATH]``. Both sides stop at the first update after which the
mean return of the last 100 episodes reaches the threshold, or at their budget: rl-zoo's
n_timesteps for RecurrentPPO (its learning rate and clip range schedules end there), the
example's ``timesteps_total`` for rlmesh. Measured, never asserted. The peer's venv needs
sb3-contrib (``make bench-peers`` installs it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from .bench_ppo_envs import PEER_PYTHON, row, run_peer, run_rlmesh, run_row
from .bench_stability import run_train

HERE = Path(__file__).resolve().parent
# env -> (tuned example, threshold, RecurrentPPO's budget: rl-zoo's n_timesteps).
EXAMPLES: dict[str, tuple[str, float, int]] = {
    "cartpole": ("stateless-cartpole-ppo.yaml", 475.0, 100_000),
    "pendulum": ("stateless-pendulum-ppo.yaml", -200.0, 100_000),
}
# PPO's defaults with only the LSTM switched on: the goal is the threshold within 3x the
# tuned peer's budget.
DEFAULTS_ARGS = ["--run", "PPO", "--env", "rlmesh.env.stateless:StatelessCartPole",
                 "--config", json.dumps({"model": {"use_lstm": True}})]


def run_recurrent_ppo(python: Path, env: str, seed: int) -> dict[str, Any]:
    """RecurrentPPO with rl-zoo's settings and budget, and the process's wall time."""
    return run_peer([str(python), str(HERE / "peer_sb3_recurrent.py"), "--env", env,
                     "--seed", str(seed)])


def run_defaults(seed: int, budget: int, tmp: Path) -> dict[str, Any]:
    stop = json.dumps({"episode_reward_mean": EXAMPLES["cartpole"][1], "timesteps_total": budget})
    return run_row(*run_train([*DEFAULTS_ARGS, "--stop", stop, "--seed", str(seed)],
                              tmp / f"defaults-{seed}"))


def ratios(ours: list[dict], theirs: list[dict], threshold: float, budget: int) -> str:
    """Medians of rlmesh/RecurrentPPO over the seeds. A peer that did not reach the
    threshold counts with its whole budget, so that seed's ratio is an upper bound (<=); a
    seed where rlmesh did not reach it has no ratio."""
    steps, walls, bounds = [], [], 0
    for a, b in zip(ours, theirs):
        if a["mean"] < threshold:
            continue
        bounds += b["mean"] < threshold
        steps.append(a["steps"] / b["steps"])
        walls.append(a["wall_s"] / b["wall_s"])
    if not steps:
        return "rlmesh reached the threshold on no seed"
    sign = "<=" if bounds else ""
    step_ratio, wall_ratio = statistics.median(steps), statistics.median(walls)
    return (f"median rlmesh/RecurrentPPO over {len(steps)} seed(s) rlmesh solved: env steps "
            f"{sign}{step_ratio:.2f}x, s process {sign}{wall_ratio:.2f}x"
            f" (RecurrentPPO reached {threshold:g} within its {budget:,} steps on "
            f"{sum(b['mean'] >= threshold for b in theirs)} of {len(theirs)} seeds)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="cartpole,pendulum,defaults")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--peer-python", type=Path, default=PEER_PYTHON,
                   help="the python of the venv with sb3-contrib (default: .venv-peers)")
    args = p.parse_args(argv)
    print(f"load average at start: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    header = ("| side | seed | env steps | last mean | reached | s training | s process |\n"
              "|---|---:|---:|---:|---|---:|---:|")
    summary = []
    with tempfile.TemporaryDirectory() as tmp:
        for env in [e for e in args.only.split(",") if e in EXAMPLES]:
            example, threshold, budget = EXAMPLES[env]
            print(f"\n{example}: threshold {threshold:g}; RecurrentPPO's budget {budget:,}\n")
            print(header)
            ours, theirs = [], []
            for seed in args.seeds:
                ours.append(run_rlmesh(example, seed, None, Path(tmp)))
                print(row(f"rlmesh {example}", seed, ours[-1], threshold), flush=True)
                theirs.append(run_recurrent_ppo(args.peer_python, env, seed))
                print(row(f"RecurrentPPO {theirs[-1]['version']} rl-zoo", seed, theirs[-1],
                          threshold), flush=True)
            summary.append(f"{example}: {ratios(ours, theirs, threshold, budget)}")
        if "defaults" in args.only.split(","):
            threshold, budget = EXAMPLES["cartpole"][1], 3 * EXAMPLES["cartpole"][2]
            print(f"\nPPO defaults + use_lstm on StatelessCartPole: threshold {threshold:g}, "
                  f"budget {budget:,} (3x RecurrentPPO's tuned one)\n")
            print(header)
            runs = []
            for seed in args.seeds:
                runs.append(run_defaults(seed, budget, Path(tmp)))
                print(row("rlmesh PPO defaults", seed, runs[-1], threshold), flush=True)
            solved = [r["steps"] for r in runs if r["mean"] >= threshold]
            summary.append(f"defaults: reached {threshold:g} on {len(solved)} of {len(runs)} "
                           f"seeds within {budget:,} steps"
                           + (f", median {statistics.median(solved):,.0f}" if solved else ""))
    print("\n" + "\n".join(summary))
    print(f"load average at end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
