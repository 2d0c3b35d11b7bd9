"""SimpleQ and Rainbow-style DQN on CartPole-v1 against RLlib's own stop criteria.

``rainbow_learning``: ``rlmesh train`` per seed, stopped at a training mean return of 150
(RLlib's tuned examples' threshold) or at the budget: SimpleQ with its defaults (RLlib's
``cartpole-simpleq.yaml``: 150 within 50k env steps) and DQN with every Rainbow part on --
C51 (51 atoms on [0, 100]: CartPole's returns at gamma 0.99), noisy nets, dueling, double
Q, 3-step returns, prioritized replay -- and RLlib's DQN defaults otherwise (150 within
100k, ``cartpole-dqn-softq.yaml``'s budget). The Rainbow runs take fragments of 32 steps
with training_intensity 8: RLlib's own ratio (one gradient step of 32 per 4 env steps)
in 8 gradient steps per learner call. Printed per seed: reached or not, env steps,
seconds (process start to exit). No peer runs here: the reference is RLlib's budget.
``python -m tests.benchmarks.run --only rainbow`` or ``python -m tests.benchmarks.bench_rainbow``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .bench_ppo import _results, _train_cmd
from .bench_runtime import Row
from .ppo_sides import started

THRESHOLD = 150.0
RAINBOW = {"num_atoms": 51, "v_min": 0.0, "v_max": 100.0, "noisy": True, "dueling": True,
           "double_q": True, "n_step": 3,
           "replay_buffer_config": {"type": "MultiAgentPrioritizedReplayBuffer"},
           "rollout_fragment_length": 32, "training_intensity": 8}
# name -> (--run, --config, RLlib's env-step budget)
RUNS: dict[str, tuple[str, dict[str, Any], int]] = {
    "SimpleQ": ("SimpleQ", {}, 50_000),
    "Rainbow DQN": ("DQN", RAINBOW, 100_000),
}


@dataclass(frozen=True)
class RainbowSizes:
    seeds: tuple[int, ...]


DEFAULT = RainbowSizes(seeds=(0, 1, 2))
QUICK = RainbowSizes(seeds=(0,))


def learn(name: str, seed: int, tmp: Path) -> dict[str, Any]:
    """One ``rlmesh train`` run to THRESHOLD or its budget: reached, env steps, seconds."""
    run, config, budget = RUNS[name]
    local_dir = tmp / f"{run}-{seed}"
    args = ["--run", run, "--env", "CartPole-v1", "--local-dir", str(local_dir),
            "--seed", str(seed), "--config", json.dumps(config),
            "--stop", json.dumps({"episode_reward_mean": THRESHOLD, "timesteps_total": budget})]
    t0 = time.perf_counter()
    with started(_train_cmd(*args), stdout=subprocess.DEVNULL) as (proc, _):
        code = proc.wait()
    wall = time.perf_counter() - t0
    results = _results(local_dir)
    if code != 0 or not results:
        raise RuntimeError(f"rlmesh train --run {run} --seed {seed} exited with {code}")
    last = results[-1]
    best = max(r["episode_reward_mean"] for r in results)
    return {"reached": last["episode_reward_mean"] >= THRESHOLD, "steps": last["timesteps_total"],
            "wall": wall, "best": best, "budget": budget}


def bench_learning(sizes: RainbowSizes, tmp: Path) -> list[Row]:
    rows: list[Row] = []
    for name in RUNS:
        for seed in sizes.seeds:
            got = learn(name, seed, tmp)
            print(f"  {name} seed {seed}: reached {THRESHOLD:g} {'yes' if got['reached'] else 'no'}"
                  f", {got['steps']} env steps, {got['wall']:.1f} s (best mean "
                  f"{got['best']:.1f})", flush=True)
            bench = f"{name}, CartPole-v1 to {THRESHOLD:g} (training mean), seed {seed}"
            peer = f"RLlib's budget ({got['budget']:,} env steps)"
            steps = got["steps"] if got["reached"] else float("nan")  # nan: a goal missed
            rows += [Row(bench, "env steps" + ("" if got["reached"] else " (not reached)"),
                         steps, got["budget"], peer, goal=1.0),
                     Row(bench, "s, process start to exit", got["wall"], float("nan"), "none")]
    return rows


BENCHMARKS: dict[str, Callable[[RainbowSizes, Path], list[Row]]] = {
    "rainbow_learning": bench_learning,
}


if __name__ == "__main__":
    seeds = tuple(int(s) for s in sys.argv[1:]) or DEFAULT.seeds
    with tempfile.TemporaryDirectory(prefix="rlb-") as tmp:
        for row in bench_learning(RainbowSizes(seeds), Path(tmp)):
            print(f"{row.bench}: {row.metric} {row.rlmesh:.1f}")
