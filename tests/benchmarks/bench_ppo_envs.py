"""PPO beyond CartPole: rlmesh's tuned examples for Pendulum-v1 (to -250) and LunarLander-v3
(to 200) against stable-baselines3 with rl-zoo's hyperparameters (``peer_sb3.py --env``),
taking turns per seed in the same run; env steps and seconds to the threshold, as markdown.

``python -m tests.benchmarks.bench_ppo_envs [--only pendulum,lunar] [--seeds 0 1 2]
[--config JSON] [--peer-python PATH]`` (``--config`` goes to every ``rlmesh train``).
Both sides get the example's step budget and stop at the first rollout after which the mean
return of the last 100 episodes reaches the threshold. Measured, never asserted. The peers'
venv needs box2d and pygame for LunarLander (``make bench-peers`` installs them).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import children
from .bench_stability import run_train

HERE = Path(__file__).resolve().parent
PEER_PYTHON = HERE.parents[1] / ".venv-peers" / "bin" / "python"
# env -> (tuned example, threshold, step budget: the example's timesteps_total stop).
EXAMPLES: dict[str, tuple[str, float, int]] = {
    "pendulum": ("pendulum-ppo.yaml", -250.0, 500_000),
    "lunar": ("lunarlander-ppo.yaml", 200.0, 1_500_000),
}


def run_rlmesh(example: str, seed: int, config: str | None, tmp: Path) -> dict[str, Any]:
    """``rlmesh train -f example --seed seed`` to its own stop: steps, returns, seconds."""
    return run_row(*run_train(["-f", example, "--seed", str(seed)],
                              tmp / f"{Path(example).stem}-{seed}", config))


def run_row(rows: list[dict[str, Any]], wall: float) -> dict[str, Any]:
    """A run's result rows as one row of the table: steps, returns, seconds."""
    last = rows[-1]
    return {"steps": last["timesteps_total"], "mean": last["episode_reward_mean"],
            "best": max(r["episode_reward_mean"] for r in rows),
            "train_s": last["time_total_s"], "wall_s": wall}


def run_sb3(python: Path, env: str, seed: int, budget: int) -> dict[str, Any]:
    """SB3's PPO to the same threshold within the same budget, and the process's wall time."""
    return run_peer([str(python), str(HERE / "peer_sb3.py"), "--env", env, "--seed", str(seed),
                     "--timesteps", str(budget)])


def run_peer(cmd: list[str]) -> dict[str, Any]:
    """A peer script's JSON line as a row (steps, means, seconds, version), and the wall time
    of its process (bench_recurrent runs RecurrentPPO's script with it too)."""
    # One torch thread, as rlmesh's learner has: on this loaded 2-core VM SB3's default of
    # two OpenMP threads spinning against other processes made a rollout 8x slower.
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    proc = children.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"steps": out["timesteps"], "mean": out["episode_reward_mean"],
            "best": out["best_mean"], "train_s": out["learn_s"], "wall_s": wall,
            "version": out.get("sb3_contrib", out["stable_baselines3"])}


def row(side: str, seed: int, r: dict[str, Any], threshold: float) -> str:
    reached = "yes" if r["mean"] >= threshold else f"no (best {r['best']:.1f})"
    return (f"| {side} | {seed} | {r['steps']:,} | {r['mean']:.1f} | {reached} | "
            f"{r['train_s']:.1f} | {r['wall_s']:.1f} |")


def ratios(ours: list[dict], theirs: list[dict], threshold: float) -> str:
    """Medians of rlmesh/SB3 over the seeds where both reached the threshold."""
    pairs = [(a, b) for a, b in zip(ours, theirs)
             if a["mean"] >= threshold and b["mean"] >= threshold]
    if not pairs:
        return "no seed where both reached the threshold"
    med = {k: statistics.median(a[k] / b[k] for a, b in pairs)
           for k in ("steps", "train_s", "wall_s")}
    return (f"median rlmesh/SB3 over {len(pairs)} seed(s): env steps {med['steps']:.2f}x, "
            f"s training {med['train_s']:.2f}x, s process {med['wall_s']:.2f}x")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="pendulum,lunar")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--config", help="JSON overrides for every rlmesh run")
    p.add_argument("--peer-python", type=Path, default=PEER_PYTHON,
                   help="the python of the venv with stable-baselines3 (default: .venv-peers)")
    args = p.parse_args(argv)
    print(f"load average at start: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    summary = []
    with tempfile.TemporaryDirectory() as tmp:
        for env in args.only.split(","):
            example, threshold, budget = EXAMPLES[env]
            print(f"\n{example}: threshold {threshold:g}, budget {budget:,} env steps\n")
            print("| side | seed | env steps | last mean | reached | s training | s process |")
            print("|---|---:|---:|---:|---|---:|---:|")
            ours, theirs = [], []
            for seed in args.seeds:
                ours.append(run_rlmesh(example, seed, args.config, Path(tmp)))
                print(row(f"rlmesh {example}", seed, ours[-1], threshold), flush=True)
                theirs.append(run_sb3(args.peer_python, env, seed, budget))
                print(row(f"SB3 {theirs[-1]['version']} rl-zoo", seed, theirs[-1], threshold),
                      flush=True)
            summary.append(f"{example}: {ratios(ours, theirs, threshold)}")
    print("\n" + "\n".join(summary))
    print(f"load average at end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
