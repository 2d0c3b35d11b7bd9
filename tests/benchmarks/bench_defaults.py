"""Untuned PPO across small problems: ``rlmesh train --run PPO --env ENV`` with nothing but a
stop, so the defaults alone decide. Per env and seed: env steps and wall seconds to the
threshold (or the best mean return within the budget). Measured, never asserted.

``python -m tests.benchmarks.bench_defaults [--envs cartpole,pendulum,acrobot,lunar]
[--seeds 0 1 2] [--config JSON]`` (``--config`` overrides defaults, to try candidates).
LunarLander needs box2d (``rlmesh[envs]``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from .bench_stability import run_train

# name -> (env id, threshold on the mean return of the last 100 episodes, env-step budget)
ENVS: dict[str, tuple[str, float, int]] = {
    "cartpole": ("CartPole-v1", 475.0, 300_000),
    "pendulum": ("Pendulum-v1", -250.0, 1_000_000),
    "acrobot": ("Acrobot-v1", -100.0, 500_000),
    "lunar": ("LunarLander-v3", 200.0, 2_000_000),
}


def train(env: str, seed: int, stop: dict[str, float], config: str | None, tmp: Path
          ) -> tuple[list[dict[str, Any]], float]:
    """``rlmesh train --run PPO --env env --seed seed --stop stop``: result rows, wall s."""
    return run_train(["--run", "PPO", "--env", env, "--seed", str(seed),
                      "--stop", json.dumps(stop)], tmp / f"{env}-{seed}", config)


def grad_steps(row: dict[str, Any]) -> int:
    stats = row.get("info", {}).get("learner", {}).get("default_policy", {})
    return int(stats.get("num_grad_updates", 0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", default="cartpole,pendulum,acrobot")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--config", default=None)
    args = parser.parse_args()
    print(f"config: {args.config or 'defaults'}")
    print("| env | seed | reached | env steps | gradient steps | s in training | s, process | "
          "best mean |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.envs.split(","):
            env, threshold, budget = ENVS[name]
            walls = []
            for seed in args.seeds:
                stop = {"episode_reward_mean": threshold, "timesteps_total": budget}
                rows, wall = train(env, seed, stop, args.config, Path(tmp))
                last = rows[-1]
                reached = last["episode_reward_mean"] >= threshold
                best = max(r["episode_reward_mean"] for r in rows)
                grads = sum(grad_steps(r) for r in rows)
                walls.append(wall if reached else float("inf"))
                print(f"| {env} | {seed} | {'yes' if reached else 'no'} | "
                      f"{last['timesteps_total']:,} | {grads:,} | {last['time_total_s']:.1f} | "
                      f"{wall:.1f} | {best:.1f} |", flush=True)
            print(f"| {env} | median | | | | | {statistics.median(walls):.1f} | |", flush=True)


if __name__ == "__main__":
    main()
