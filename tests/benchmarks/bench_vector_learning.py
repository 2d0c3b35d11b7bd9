"""PPO to each task's target through the vector backend against the one-env path, measured in
the same run (issue 52): CartPole-v1 (475, gymnasium's numpy ``CartPoleVectorEnv``),
Acrobot-v1 (-100) and Pendulum-v1 (-250) (EnvPool's C++ envs, ``env_config`` vector
``envpool``: gymnasium has no numpy vector versions of them).

``python -m tests.benchmarks.bench_vector_learning [--quick] [--envs cartpole,acrobot,pendulum]
[--seeds 0 1 2] [--config JSON]`` (``--quick``: seed 0 only; ``--config`` overrides the vector
side's settings, to try candidates).

The two paths of each task, each ``rlmesh train`` in a process of its own:

- CartPole-v1: ``-f cartpole-ppo.yaml`` (2 runners x 12 envs, one ``gym.Env`` each) against
  ``-f cartpole-ppo-vector.yaml`` (1 runner, 64 envs as one vector env);
- Acrobot-v1: PPO's defaults (``--run PPO --env Acrobot-v1``, as ``bench_defaults``, the
  only settings the one-env path has for it) against ``-f acrobot-ppo-vector.yaml``;
- Pendulum-v1: ``-f pendulum-ppo.yaml`` against ``-f pendulum-ppo-vector.yaml``.

Seconds to the target are the run's training time: the sum of ``time_this_iter_s`` over the
iterations up to the first whose ``episode_reward_mean`` (the last 100 episodes) reaches it;
start-up is not in it. Per task and seed the one-env run goes first, then the vector run, so
both see the same load from other work. The ratio is vector / one-env seconds (below 1: the
vector path is faster). The issue's must-show for CartPole, at most 3 s of training on every
seed, is a line of its own. Measured, never asserted: a miss is reported, not failed.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .bench_stability import run_train

CARTPOLE_LIMIT_S = 3.0  # the issue: 475 on CartPole through the vector backend in <= 3 s


@dataclass(frozen=True)
class Task:
    env: str
    target: float  # episode_reward_mean over the last 100 episodes
    one_env: tuple[str, ...]  # rlmesh train arguments of the one-env path
    one_env_name: str
    vector_file: str  # rlmesh/tuned_examples


def _defaults(env: str, target: float, budget: int) -> tuple[str, ...]:
    return ("--run", "PPO", "--env", env, "--stop",
            json.dumps({"episode_reward_mean": target, "timesteps_total": budget}))


TASKS: dict[str, Task] = {
    "cartpole": Task("CartPole-v1", 475.0, ("-f", "cartpole-ppo.yaml"), "cartpole-ppo.yaml",
                     "cartpole-ppo-vector.yaml"),
    # bench_defaults's target and budget for Acrobot.
    "acrobot": Task("Acrobot-v1", -100.0, _defaults("Acrobot-v1", -100.0, 500_000),
                    "PPO defaults", "acrobot-ppo-vector.yaml"),
    "pendulum": Task("Pendulum-v1", -250.0, ("-f", "pendulum-ppo.yaml"), "pendulum-ppo.yaml",
                     "pendulum-ppo-vector.yaml"),
}


@dataclass
class Run:
    """One ``rlmesh train``: training seconds and env steps to the target (None: missed)."""

    seconds: float | None
    steps: int
    final: float  # the last iteration's episode_reward_mean
    total_s: float  # training seconds of the whole run


def to_target(rows: list[dict[str, Any]], target: float) -> Run:
    """The iterations' training time summed up to the first that reaches ``target``."""
    seconds = 0.0
    for row in rows:
        seconds += row["time_this_iter_s"]
        mean = row.get("episode_reward_mean")
        if mean is not None and mean >= target:  # NaN (no episode yet) never is
            return Run(seconds, int(row["timesteps_total"]), float(mean), seconds)
    last = rows[-1]
    final = last.get("episode_reward_mean")
    return Run(None, int(last["timesteps_total"]), math.nan if final is None else float(final),
               seconds)


def train(args: tuple[str, ...], seed: int, tmp: Path, config: str | None = None
          ) -> list[dict[str, Any]]:
    """``rlmesh train *args --seed seed`` in a process of its own: its result rows."""
    rows, _ = run_train([*args, "--seed", str(seed)], Path(tempfile.mkdtemp(dir=tmp)), config)
    return rows


def _s(run: Run) -> str:
    return f"{run.seconds:.2f}" if run.seconds is not None else f"missed ({run.total_s:.1f} s)"


def _ratio(vector: Run, one: Run) -> float:
    if vector.seconds is None or one.seconds is None:
        return math.nan
    return vector.seconds / one.seconds


def _spread(values: list[float]) -> str:
    if not values:
        return "-"
    return (f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"
            if len(values) > 1 else f"{values[0]:.2f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="seed 0 only")
    parser.add_argument("--envs", default=",".join(TASKS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--config", default=None, help="JSON overrides of the vector side")
    args = parser.parse_args(argv)
    names = args.envs.split(",")
    unknown = [n for n in names if n not in TASKS]
    if unknown:
        parser.error(f"--envs: unknown {', '.join(unknown)}; known: {', '.join(TASKS)}")
    seeds = [0] if args.quick else args.seeds
    runs: dict[str, list[tuple[int, Run, Run]]] = {}
    print("| env | path | seed | s of training to target | env steps | final mean | "
          "vector / one-env |")
    print("|---|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            task = TASKS[name]
            for seed in seeds:
                one = to_target(train(task.one_env, seed, Path(tmp)), task.target)
                vector = to_target(train(("-f", task.vector_file), seed, Path(tmp),
                                         args.config), task.target)
                runs.setdefault(name, []).append((seed, one, vector))
                for path, run, ratio in ((task.one_env_name, one, ""),
                                         (task.vector_file, vector,
                                          f"{_ratio(vector, one):.2f}")):
                    print(f"| {task.env} ({task.target:g}) | {path} | {seed} | {_s(run)} | "
                          f"{run.steps:,} | {run.final:.1f} | {ratio} |", flush=True)
    print()
    print("| env | one-env s, median (range) | vector s, median (range) | "
          "vector / one-env (of medians) | reached, one-env / vector |")
    print("|---|---:|---:|---:|---|")
    for name, seeded in runs.items():
        task = TASKS[name]
        ones = [one.seconds for _, one, _ in seeded if one.seconds is not None]
        vecs = [vec.seconds for _, _, vec in seeded if vec.seconds is not None]
        both = len(ones) == len(vecs) == len(seeded)
        ratio = (f"{statistics.median(vecs) / statistics.median(ones):.2f}" if both
                 else "n/a (a run missed)")
        print(f"| {task.env} ({task.target:g}) | {_spread(ones)} | {_spread(vecs)} | {ratio} | "
              f"{len(ones)}/{len(seeded)} / {len(vecs)}/{len(seeded)} |")
    if "cartpole" in runs:
        seconds = [vec.seconds for _, _, vec in runs["cartpole"]]
        met = all(s is not None and s <= CARTPOLE_LIMIT_S for s in seconds)
        shown = ", ".join(f"seed {seed}: {_s(vec)}" for seed, _, vec in runs["cartpole"])
        print(f"\nCartPole-v1 to 475 through the vector backend in <= {CARTPOLE_LIMIT_S:g} s "
              f"of training on every seed: {'met' if met else 'missed'} ({shown})")


if __name__ == "__main__":
    main()
