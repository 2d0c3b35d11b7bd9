"""What a user types first, with the defaults alone, beside the best tuned peer (issue 54).

RLlib's docs open with ``rlmesh train --run DQN --env CartPole-v1`` (the seeds' first
command). Each task below runs that command with nothing but a seed and a stop, against
stable-baselines3 with rl-baselines3-zoo's tuned hyperparameters for the same env, seed by
seed, taking turns, each side in a process of its own. Both sides stop on the same rule: the
mean return of the last 100 training episodes at the threshold (rlmesh checks it after each
iteration, SB3's stopper after each rollout), or the budget. Per seed: env steps to the
threshold and wall seconds from process start to exit; then mean +- std over the seeds and
the ratios. A side that ran out its budget without reaching the threshold reports its budget
and its wall, so a ratio against it is a bound, and says so.

``python -m tests.benchmarks.bench_first_commands [--tasks dqn-cartpole] [--seeds 0 1 2]
[--config JSON] [--rlmesh-only]`` (``--config``: rlmesh's side with those keys changed, a
sweep of the defaults).
Needs ``make bench-peers`` for the peer's side. Measured, never asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .bench_ppo import PEERS_PYTHON, PEERS_READY, _results, _train_cmd
from .bench_runtime import ROOT
from .ppo_sides import peer_json, run_timed

BENCH = ROOT / "tests" / "benchmarks"


@dataclass(frozen=True)
class Task:
    run: str  # rlmesh's --run
    env: str
    threshold: float
    budget: int  # env steps, both sides
    peer: list[str]  # the peer's command after its python, --seed/--threshold/--timesteps added
    peer_name: str
    peer_budget: int | None = None  # where a longer budget would change the peer's settings


SB3_PPO = [str(BENCH / "peer_sb3.py")]
TASKS = {
    # rl-zoo's dqn.yml CartPole-v1 entry (peer_sb3_dqn.py), its epsilon schedule kept in env
    # steps over the longer budget.
    "dqn-cartpole": Task("DQN", "CartPole-v1", 450.0, 150_000,
                         [str(BENCH / "peer_sb3_dqn.py"), "learn"],
                         "stable-baselines3 DQN, rl-zoo's CartPole-v1 hyperparameters"),
    # rl-zoo's ppo.yml entries (peer_sb3.py): CartPole (8 envs x 32 steps, 20 epochs, lr and
    # clip falling linearly over the budget) and Pendulum (4 envs x 1024, gSDE).
    # (rl-zoo's CartPole schedules run to 0 over the budget: the peer keeps rl-zoo's 100k.)
    "ppo-cartpole": Task("PPO", "CartPole-v1", 475.0, 300_000, [*SB3_PPO, "--env", "cartpole"],
                         "stable-baselines3 PPO, rl-zoo's CartPole-v1 hyperparameters",
                         peer_budget=100_000),
    # (rl-zoo's Pendulum entry trains 100k steps: the peer keeps that budget.)
    "ppo-pendulum": Task("PPO", "Pendulum-v1", -250.0, 1_000_000,
                         [*SB3_PPO, "--env", "pendulum"],
                         "stable-baselines3 PPO, rl-zoo's Pendulum-v1 hyperparameters",
                         peer_budget=100_000),
    # SB3 has no APPO: the best tuned peer on the task is its PPO.
    "appo-cartpole": Task("APPO", "CartPole-v1", 475.0, 1_000_000,
                          [*SB3_PPO, "--env", "cartpole"],
                          "stable-baselines3 PPO (no APPO there), rl-zoo's CartPole-v1 "
                          "hyperparameters", peer_budget=100_000),
    # rl-zoo's sac.yml Pendulum entry (peer_sb3_offpolicy.py), the same 100-episode window.
    "sac-pendulum": Task("SAC", "Pendulum-v1", -250.0, 100_000,
                         [str(BENCH / "peer_sb3_offpolicy.py"), "--algo", "sac", "--window",
                          "100"],
                         "stable-baselines3 SAC, rl-zoo's Pendulum-v1 hyperparameters"),
}


def rlmesh_side(task: Task, seed: int, tmp: Path, config: str | None = None
                ) -> dict[str, Any]:
    local_dir = tmp / f"{task.run}-{task.env}-{seed}"
    args = ["--run", task.run, "--env", task.env, "--seed", str(seed), "--local-dir",
            str(local_dir), "--stop", json.dumps({"episode_reward_mean": task.threshold,
                                                  "timesteps_total": task.budget})]
    if config:  # a sweep's point: the defaults with these keys changed
        args += ["--config", config]
    code, _, wall = run_timed(_train_cmd(*args), stdout=subprocess.DEVNULL)
    results = _results(local_dir)
    if code != 0 or not results:
        raise RuntimeError(f"rlmesh train {' '.join(args)} exited with {code}")
    last = results[-1]
    return {"wall": wall, "steps": last["timesteps_total"],
            "solved": last["episode_reward_mean"] >= task.threshold,
            "mean": last["episode_reward_mean"]}


def peer_side(task: Task, seed: int) -> dict[str, Any]:
    cmd = [str(PEERS_PYTHON), *task.peer, "--seed", str(seed), "--threshold",
           str(task.threshold), "--timesteps", str(task.peer_budget or task.budget)]
    got, wall = peer_json(cmd)
    return {"wall": wall, "steps": got["timesteps"], "solved": got["solved"],
            "mean": got.get("episode_reward_mean"),
            "best": got.get("best_mean", got.get("episode_reward_mean"))}


def _spread(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:,.0f}"
    return f"{statistics.mean(values):,.0f} ± {statistics.stdev(values):,.0f}"


def report(name: str, task: Task, runs: list[tuple[int, dict, dict]]) -> None:
    print(f"\n### {name}: `rlmesh train --run {task.run} --env {task.env}` to "
          f"{task.threshold:g} (training mean of the last 100 episodes), budget "
          f"{task.budget:,} env steps; peer: {task.peer_name}\n")
    print("| seed | rlmesh env steps | rlmesh s | peer env steps | peer s | steps ratio | "
          "wall ratio |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for seed, ours, theirs in runs:
        bound = "" if theirs["solved"] else " (peer unsolved: <)"
        mark = lambda r: "" if r["solved"] else " (not reached)"  # noqa: E731
        print(f"| {seed} | {ours['steps']:,}{mark(ours)} | {ours['wall']:.1f} | "
              f"{theirs['steps']:,}{mark(theirs)} | {theirs['wall']:.1f} | "
              f"{ours['steps'] / theirs['steps']:.2f}x{bound} | "
              f"{ours['wall'] / theirs['wall']:.2f}x{bound} |")
    steps = [r[1]["steps"] for r in runs], [r[2]["steps"] for r in runs]
    walls = [r[1]["wall"] for r in runs], [r[2]["wall"] for r in runs]
    unsolved = sum(not r[2]["solved"] for r in runs)
    bound = f" (the peer did not reach it on {unsolved} seed(s): bounds)" if unsolved else ""
    print(f"| mean ± std | {_spread(steps[0])} | {_spread(walls[0])} | {_spread(steps[1])} | "
          f"{_spread(walls[1])} | {sum(steps[0]) / sum(steps[1]):.2f}x | "
          f"{sum(walls[0]) / sum(walls[1]):.2f}x |{bound}")
    print(f"\nrlmesh reached {task.threshold:g} on {sum(r[1]['solved'] for r in runs)} of "
          f"{len(runs)} seeds; the peer on {len(runs) - unsolved} (its best means: "
          f"{[r[2].get('best') for r in runs]})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--config", help="JSON of keys to change on rlmesh's side (a sweep "
                        "of the defaults); the first command alone without it")
    parser.add_argument("--rlmesh-only", action="store_true",
                        help="skip the peer (a sweep's runs)")
    args = parser.parse_args()
    if not args.rlmesh_only and not PEERS_READY.exists():
        raise SystemExit("the peers' venv is missing: make bench-peers")
    with tempfile.TemporaryDirectory(prefix="rlmesh-first-") as tmp:
        for name in args.tasks.split(","):
            task = TASKS[name]
            runs = []
            for seed in args.seeds:  # take turns, seed by seed
                ours = rlmesh_side(task, seed, Path(tmp), args.config)
                if args.rlmesh_only:
                    print(f"  {name} seed {seed}: rlmesh {ours}", flush=True)
                    continue
                theirs = peer_side(task, seed)
                print(f"  {name} seed {seed}: rlmesh {ours}, peer {theirs}", flush=True)
                runs.append((seed, ours, theirs))
            if runs:
                report(name, task, runs)


if __name__ == "__main__":
    main()
