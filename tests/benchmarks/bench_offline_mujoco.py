"""Offline RL on a MuJoCo dataset made here (issues 35, 54): BC, MARWIL, CQL and IQL each train
on the same data for the same number of gradient steps, per seed, evaluated greedily in the
real env every ``--eval-every`` gradient steps (the curve); reported beside the dataset's own
average episode return, raw and D4RL-normalized (100 x (return - random) / (expert -
random), D4RL's reference returns of the v2 envs).

``python -m tests.benchmarks.bench_offline_mujoco DATA_DIR --env HalfCheetah-v5
[--steps 10000] [--eval-every 2500] [--seeds 0,1,2] [--algos BC,MARWIL,CQL,IQL]
[--iql-reward-scale]``. DATA_DIR is ``python -m rlmesh.cli.make_dataset``'s output (with
``--policy-rollout``: D4RL's "medium" recipe) or what ``bench_mujoco --output`` wrote (a SAC
run's samples: its replay, "medium-replay" in D4RL's terms). One JSON line per run (its
curve included) on stdout and appended to ``--log``; ``--table LOG`` prints the markdown
tables (each seed's final return, mean +- std, normalized, the curves as means over seeds)
of the runs in LOG, so runs made in several processes at once are tabled together.
Measured, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from rlmesh.driver.algorithm_registry import get_config_class
from rlmesh.cli.make_dataset import episode_returns

from .bench_mujoco import report
from .bench_runtime import ROOT

# D4RL's REF_MIN_SCORE / REF_MAX_SCORE (random and expert policies, v2 envs).
D4RL_REF = {"HalfCheetah": (-280.178953, 12135.0), "Hopper": (-20.272305, 3234.3),
            "Walker2d": (1.629008, 4592.3)}
NET = {"fcnet_hiddens": [256, 256], "fcnet_activation": "relu"}
ROWS = 256  # a gradient step's batch, every algorithm
STEPS_PER_ITER = 500


def settings(algo: str) -> dict[str, Any]:
    """Each algorithm's settings at [256, 256], batch 256, one Adam rate of 3e-4 (the CQL and
    IQL papers' MuJoCo values where they have them)."""
    per_iter = {"min_train_timesteps_per_iteration": ROWS * STEPS_PER_ITER}
    if algo in ("BC", "MARWIL"):  # whole episodes per iteration, one pass of minibatches
        return {"lr": 3e-4, "train_batch_size": ROWS * STEPS_PER_ITER, "minibatch_size": ROWS,
                "num_epochs": 1, "model": NET, **({"beta": 1.0} if algo == "MARWIL" else {})}
    nets = {"q_model_config": NET, "policy_model_config": NET}
    if algo == "CQL":  # Kumar et al.'s MuJoCo settings (min_q_weight 5, no Lagrangian, 10
        # sampled actions of each kind: 1.2x the step of 4 since issue 54's faster CQL)
        return {"train_batch_size": ROWS, "twin_q": True, "bc_iters": 0, "min_q_weight": 5.0,
                "num_actions": 10, "temperature": 1.0, "lagrangian": False, "tau": 0.005,
                "optimization_config": {"actor_learning_rate": 1e-4,
                                        "critic_learning_rate": 3e-4,
                                        "entropy_learning_rate": 1e-4}, **nets, **per_iter}
    # IQL: Kostrikov et al.'s locomotion settings (expectile 0.7, beta 3.0, tau 0.005); its
    # networks all come from ``model``.
    return {"train_batch_size": ROWS, "expectile": 0.7, "beta": 3.0, "tau": 0.005,
            "actor_lr": 3e-4, "critic_lr": 3e-4, "value_lr": 3e-4, "twin_q": True,
            "model": NET, **per_iter}


def run(algo: str, data: str, env_id: str, steps: int, seed: int, episodes: int,
        eval_every: int, eval_envs: int = 10,
        overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """``steps`` gradient steps of ``algo`` on ``data`` (whole iterations of
    ``STEPS_PER_ITER``), ``episodes`` greedy episodes every ``eval_every`` of them: the curve
    ``[[gradient steps, mean return], ...]``, its last point the run's return."""
    iterations = max(1, steps // STEPS_PER_ITER)
    every = max(1, eval_every // STEPS_PER_ITER)
    config = (get_config_class(algo)().environment(env_id)
              .offline_data(input=data)
              .evaluation(evaluation_duration=episodes, evaluation_duration_unit="episodes",
                          evaluation_num_env_runners=1,
                          # the episodes side by side: one policy call a step for all
                          evaluation_config={"num_envs_per_env_runner": eval_envs})
              .debugging(seed=seed))
    config = config.update_from_dict({**settings(algo), **(overrides or {})})
    algo_obj = config.build()
    t0, updates, curve, evaluating = time.perf_counter(), 0, [], 0.0
    try:
        for i in range(1, iterations + 1):
            result = algo_obj.train()
            updates += result["info"]["learner"]["default_policy"]["num_grad_updates"]
            if i % every == 0 or i == iterations:
                t1 = time.perf_counter()
                evaluation = algo_obj.evaluate()["evaluation"]
                evaluating += time.perf_counter() - t1
                curve.append([updates, evaluation["episode_reward_mean"]])
    finally:
        algo_obj.stop()
    return {"return": curve[-1][1], "episodes": evaluation.get("episodes_this_iter"),
            "iterations": iterations, "num_grad_updates": updates, "curve": curve,
            "seconds": time.perf_counter() - t0, "eval_seconds": evaluating}


def iql_scaled_copy(data: str, info: dict[str, Any], out: Path) -> str:
    """The dataset with rewards x 1000 / (max return - min return) of its episodes: the IQL
    paper's preprocessing for locomotion (Kostrikov et al. 2021, appendix), which keeps
    exp(beta x advantage) off its cap; evaluation still plays the real env's rewards."""
    from rlmesh.offline.convert import write
    from rlmesh.offline.reader import OfflineDataset

    if not out.exists():
        scale = 1000.0 / (info["max_return"] - info["min_return"])
        episodes = OfflineDataset(data, shuffle=False).episodes
        for e in episodes:
            e["rewards"] = (e["rewards"] * scale).astype(e["rewards"].dtype)
        write(episodes, out, "parquet")
    return str(out)


def normalized(env_id: str, value: float) -> float | None:
    ref = D4RL_REF.get(env_id.split("-")[0])
    return None if ref is None else 100 * (value - ref[0]) / (ref[1] - ref[0])


def code_version() -> dict[str, Any]:
    """The commit the run used, and whether the algorithms' files differ from it (the tree
    is shared with people editing them)."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True,
                              text=True).stdout.strip()

    return {"commit": git("rev-parse", "--short", "HEAD"),
            "algorithms_edited": git("status", "--porcelain", "rlmesh/algorithms") or None}


def table(log: str, data: str | None = None) -> str:
    """Markdown tables of the runs in the JSON-lines ``log`` (those on ``data`` when given;
    a run repeated at the same algorithm, seed and steps: its last line): per algorithm and
    gradient budget each seed's final return, their mean +- std (population), the mean
    D4RL-normalized and against the dataset's average; then the curves, the mean over
    seeds at each evaluation."""
    import numpy as np

    runs: dict[tuple[str, int, int], dict[str, Any]] = {}
    with open(log) as f:
        for line in f:
            r = json.loads(line)
            if "algo" in r and "curve" in r and (data is None or r["data"] == data):
                label = r["algo"] + (f" {json.dumps(r['config'])}" if r.get("config") else "")
                runs[(label, r["gradient_steps"], r["seed"])] = r
    if not runs:
        return f"no runs with curves in {log}" + (f" on {data}" if data else "")
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for (algo, steps, _), r in sorted(runs.items(), key=lambda kv: kv[0]):
        groups.setdefault((algo, steps), []).append(r)
    first = next(iter(runs.values()))
    env, mean_data = first["env"], first["dataset_mean_return"]
    out = [f"dataset {first['data']}: {first['dataset_episodes']} episodes, "
           f"{first['dataset_steps']} steps, average return {mean_data:,.0f}"
           + ("" if normalized(env, mean_data) is None
              else f" (D4RL-normalized {normalized(env, mean_data):.1f})"), "",
           "| algorithm | gradient steps | seeds | final return per seed | mean +- std "
           "| D4RL-normalized | vs the dataset's average | s per run (eval s) |",
           "|---|---:|---|---|---:|---:|---:|---:|"]
    for (algo, steps), rs in groups.items():
        finals = np.array([r["return"] for r in rs])
        mean, std = float(finals.mean()), float(finals.std())
        norm = normalized(env, mean)
        out.append(f"| {algo} | {steps:,} | {','.join(str(r['seed']) for r in rs)} | "
                   f"{', '.join(f'{x:,.0f}' for x in finals)} | {mean:,.0f} +- {std:,.0f} | "
                   f"{'' if norm is None else f'{norm:.1f}'} | "
                   f"{f'{mean / mean_data:.2f}x' if mean_data > 0 else ''} | "
                   f"{np.mean([r['seconds'] for r in rs]):,.0f} "
                   f"({np.mean([r.get('eval_seconds', 0) for r in rs]):,.0f}) |")
    points = sorted({int(p[0]) for rs in groups.values() for r in rs for p in r["curve"]})
    names = [f"{a} ({n:,})" for a, n in groups]
    out += ["", "Mean greedy return over seeds (seed count where fewer) at each evaluation:",
            "", "| gradient steps | " + " | ".join(names) + " |",
            "|---:|" + "---:|" * len(names)]
    for point in points:
        cells = []
        for rs in groups.values():
            got = [p[1] for r in rs for p in r["curve"] if int(p[0]) == point]
            cells.append("" if not got else f"{np.mean(got):,.0f}"
                         + ("" if len(got) == len(rs) else f" ({len(got)})"))
        out.append(f"| {point:,} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="?")
    parser.add_argument("--env", default="HalfCheetah-v5")
    parser.add_argument("--steps", type=int, default=10_000, help="gradient steps per run")
    parser.add_argument("--eval-every", type=int, default=2_500,
                        help="gradient steps between greedy evaluations (the curve)")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--algos", default="BC,MARWIL,CQL,IQL")
    parser.add_argument("--episodes", type=int, default=10, help="greedy evaluation episodes")
    parser.add_argument("--iql-reward-scale", action="store_true",
                        help="IQL learns from a copy with the IQL paper's reward scaling")
    parser.add_argument("--config", type=json.loads, default={}, metavar="JSON",
                        help="keys changed from the settings below, for every algorithm run "
                             "(a sweep: recorded in each log line)")
    parser.add_argument("--log", default=str(ROOT / "docs" / "benchmarks" / "offline_mujoco.jsonl"))
    parser.add_argument("--table", metavar="LOG",
                        help="print the tables of the runs in LOG (of DATA only, if given)")
    args = parser.parse_args()
    if args.table:
        print(table(args.table, args.data))
        return
    if args.data is None:
        parser.error("DATA is required (or --table LOG)")
    for name in ("steps", "eval_every", "episodes"):
        if getattr(args, name) < STEPS_PER_ITER * (name != "episodes") or getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= "
                         f"{STEPS_PER_ITER if name != 'episodes' else 1}")
    info = episode_returns(args.data)
    dataset = {"data": args.data, "env": args.env, "dataset_mean_return": info["mean_return"],
               "dataset_normalized": normalized(args.env, info["mean_return"]),
               "dataset_episodes": info["num_episodes"], "dataset_steps": info["num_steps"]}
    print(json.dumps(dataset), flush=True)
    version = code_version()
    for seed in (int(s) for s in args.seeds.split(",")):
        for algo in args.algos.split(","):
            data = args.data
            if algo == "IQL" and args.iql_reward_scale:
                data = iql_scaled_copy(args.data, info, Path(args.data + "-iql-scaled"))
            got = run(algo, data, args.env, args.steps, seed, args.episodes, args.eval_every,
                      overrides=args.config)
            report({"algo": algo + (" (rewards scaled)" if data != args.data else ""),
                    **({"config": args.config} if args.config else {}),
                    "seed": seed, "gradient_steps": args.steps, "eval_every": args.eval_every,
                    **got, "normalized": normalized(args.env, got["return"]), **dataset,
                    **version, "load_average": os.getloadavg()[0]}, args.log)


if __name__ == "__main__":
    main()
