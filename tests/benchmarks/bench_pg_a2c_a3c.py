"""PG, A2C and A3C learning CartPole-v1: each tuned example run once per seed through the
CLI, one run at a time; env steps and seconds to its stop criterion, as a markdown table.
After each A2C seed, the peer with the same seed: stable-baselines3's A2C with rl-zoo's
hyperparameters (``peer_sb3_a2c.py``, in ``.venv-peers`` from ``make bench-peers``).

``python -m tests.benchmarks.bench_pg_a2c_a3c [--only pg,a2c,a3c] [--seeds 0 1 2]
[--config JSON] [--peer-python PATH]`` (``--config`` is passed to ``rlmesh train``: to try
other settings). Measured, never asserted: a run that stops on its step budget says so.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import children

EXAMPLES = {"pg": "cartpole-pg.yaml", "a2c": "cartpole-a2c.yaml", "a3c": "cartpole-a3c.yaml"}
HERE = Path(__file__).resolve().parent
PEER_PYTHON = HERE.parents[1] / ".venv-peers" / "bin" / "python"


def run_one(example: str, seed: int, config: str | None, tmp: Path) -> dict[str, Any]:
    """One ``rlmesh train -f example --seed seed``: the last result and the wall time."""
    local_dir = tmp / f"{Path(example).stem}-{seed}"
    cmd = [sys.executable, "-m", "rlmesh.cli.main", "train", "-f", example, "--seed", str(seed),
           "--local-dir", str(local_dir)]
    if config:
        cmd += ["--config", config]
    start = time.perf_counter()
    proc = children.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    last = json.loads(next(local_dir.glob("*/*/result.json")).read_text().splitlines()[-1])
    return {"seed": seed, "steps": last["timesteps_total"], "reward": last["episode_reward_mean"],
            "train_s": last["time_total_s"], "wall_s": wall,
            "iterations": last["training_iteration"],
            "stopped_by": next((line.removeprefix("stopped: ") for line in proc.stdout.splitlines()
                                if line.startswith("stopped: ")), "?")}


def run_peer(python: Path, seed: int) -> dict[str, Any]:
    """SB3's A2C to the same threshold: its JSON line and the process's wall time."""
    start = time.perf_counter()
    proc = children.run([str(python), str(HERE / "peer_sb3_a2c.py"), "--seed", str(seed)],
                          capture_output=True, text=True, check=True)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return {**out, "wall_s": time.perf_counter() - start}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="pg,a2c,a3c")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--config", help="JSON overrides for every run")
    p.add_argument("--peer-python", type=Path, default=PEER_PYTHON,
                   help="the python of the venv with stable-baselines3 (default: .venv-peers)")
    args = p.parse_args(argv)
    print("| example | seed | env steps | mean reward | s training | s process | iterations "
          "| stopped |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only.split(","):
            for seed in args.seeds:
                r = run_one(EXAMPLES[name], seed, args.config, Path(tmp))
                print(f"| {EXAMPLES[name]} | {seed} | {r['steps']:,} | {r['reward']:.1f} | "
                      f"{r['train_s']:.1f} | {r['wall_s']:.1f} | {r['iterations']} | "
                      f"{r['stopped_by']} |", flush=True)
                if name == "a2c" and args.peer_python.exists():
                    q = run_peer(args.peer_python, seed)
                    print(f"| SB3 {q['stable_baselines3']} A2C, rl-zoo | {seed} | "
                          f"{q['timesteps']:,} | {q['episode_reward_mean']:.1f} | "
                          f"{q['learn_s']:.1f} | {q['wall_s']:.1f} | {q['rollouts']} | "
                          f"{'solved' if q['solved'] else 'step budget'} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
