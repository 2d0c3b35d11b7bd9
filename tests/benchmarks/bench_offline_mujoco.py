"""Offline RL on a MuJoCo dataset made here (issue 35): BC, MARWIL, CQL and IQL each train on
the same data for the same number of gradient steps and are then evaluated greedily in the
real env; reported beside the dataset's own average episode return, raw and D4RL-normalized
(100 x (return - random) / (expert - random), D4RL's reference returns of the v2 envs).

``python -m tests.benchmarks.bench_offline_mujoco DATA_DIR --env HalfCheetah-v5
[--steps 10000] [--seeds 0] [--algos BC,MARWIL,CQL,IQL]``. DATA_DIR is e.g. what
``bench_mujoco --output`` wrote (a SAC run's samples: its replay, "medium-replay" in D4RL's
terms) or ``python -m rlmesh.cli.make_dataset``'s output. One JSON line per run on stdout
and appended to ``--log``. Measured, never asserted.
"""

from __future__ import annotations

import argparse
import json
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
    if algo == "CQL":  # Kumar et al.'s MuJoCo settings (min_q_weight 5, no Lagrangian) but 4
        # sampled actions of each kind, not 10: 48 ms per step instead of 116 on one thread.
        return {"train_batch_size": ROWS, "twin_q": True, "bc_iters": 0, "min_q_weight": 5.0,
                "num_actions": 4, "temperature": 1.0, "lagrangian": False, "tau": 0.005,
                "optimization_config": {"actor_learning_rate": 1e-4,
                                        "critic_learning_rate": 3e-4,
                                        "entropy_learning_rate": 1e-4}, **nets, **per_iter}
    # IQL: Kostrikov et al.'s locomotion settings (expectile 0.7, beta 3.0, tau 0.005); its
    # networks all come from ``model``.
    return {"train_batch_size": ROWS, "expectile": 0.7, "beta": 3.0, "tau": 0.005,
            "actor_lr": 3e-4, "critic_lr": 3e-4, "value_lr": 3e-4, "twin_q": True,
            "model": NET, **per_iter}


def run(algo: str, data: str, env_id: str, steps: int, seed: int,
        episodes: int) -> dict[str, Any]:
    iterations = max(1, steps // STEPS_PER_ITER)
    config = (get_config_class(algo)().environment(env_id)
              .offline_data(input=data)
              .evaluation(evaluation_interval=iterations, evaluation_duration=episodes,
                          evaluation_num_env_runners=1)
              .debugging(seed=seed))
    config = config.update_from_dict(settings(algo))
    algo_obj = config.build()
    t0, updates = time.perf_counter(), 0
    try:
        for _ in range(iterations):
            result = algo_obj.train()
            updates += result["info"]["learner"]["default_policy"]["num_grad_updates"]
    finally:
        algo_obj.stop()
    evaluation = result["evaluation"]
    return {"return": evaluation["episode_reward_mean"],
            "episodes": evaluation.get("episodes_this_iter"), "iterations": iterations,
            "num_grad_updates": updates,
            "seconds": time.perf_counter() - t0}


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data")
    parser.add_argument("--env", default="HalfCheetah-v5")
    parser.add_argument("--steps", type=int, default=10_000, help="gradient steps per run")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--algos", default="BC,MARWIL,CQL,IQL")
    parser.add_argument("--episodes", type=int, default=10, help="greedy evaluation episodes")
    parser.add_argument("--iql-reward-scale", action="store_true",
                        help="IQL learns from a copy with the IQL paper's reward scaling")
    parser.add_argument("--log", default=str(ROOT / "docs" / "benchmarks" / "offline_mujoco.jsonl"))
    args = parser.parse_args()
    info = episode_returns(args.data)
    dataset = {"data": args.data, "env": args.env, "dataset_mean_return": info["mean_return"],
               "dataset_normalized": normalized(args.env, info["mean_return"]),
               "dataset_episodes": info["num_episodes"], "dataset_steps": info["num_steps"]}
    print(json.dumps(dataset), flush=True)
    for seed in (int(s) for s in args.seeds.split(",")):
        for algo in args.algos.split(","):
            data = args.data
            if algo == "IQL" and args.iql_reward_scale:
                data = iql_scaled_copy(args.data, info, Path(args.data + "-iql-scaled"))
            got = run(algo, data, args.env, args.steps, seed, args.episodes)
            report({"algo": algo + (" (rewards scaled)" if data != args.data else ""), "seed": seed, "gradient_steps": args.steps, **got,
                    "normalized": normalized(args.env, got["return"]), **dataset}, args.log)


if __name__ == "__main__":
    main()
