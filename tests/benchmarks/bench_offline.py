"""BC and MARWIL learning from an offline data directory (docs/offline.md, "Figures"):
``python -m tests.benchmarks.bench_offline DATA_DIR [--iterations 15] [--seed 0]``.
Each trains as tests/integration/test_offline_recipe.py does and is evaluated after the last
iteration on one evaluation runner over 20 episodes (explore off); measured, never asserted."""

from __future__ import annotations

import argparse
import time

from rlmesh.algorithms.bc_config import BCConfig
from rlmesh.algorithms.marwil_config import MARWILConfig


def offline_run(config_class, data_dir: str, iterations: int, seed: int, **training):
    config = (config_class().environment("CartPole-v1")
              .offline_data(input=data_dir, off_policy_estimation_methods=["is", "wis"])
              .training(lr=0.001, train_batch_size=2000, minibatch_size=256, **training)
              .evaluation(evaluation_interval=iterations, evaluation_duration=20,
                          evaluation_num_env_runners=1)
              .debugging(seed=seed))
    algo = config.build()
    try:
        results = [algo.train() for _ in range(iterations)]
        return results, results[-1]["evaluation"]
    finally:
        algo.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("data_dir")
    p.add_argument("--iterations", type=int, default=15)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    print("| algorithm | mean (min, max) return | IS v_target / v_behavior | wall s |")
    print("| --- | --- | --- | --- |")
    for name, cls, kw in (("BC", BCConfig, {}), ("MARWIL (beta 1)", MARWILConfig, {"beta": 1.0})):
        start = time.perf_counter()
        results, ev = offline_run(cls, args.data_dir, args.iterations, args.seed, **kw)
        ope = results[-1]["off_policy_estimation"]["is"]
        print(f"| {name} | {ev['episode_reward_mean']:.1f} ({ev['episode_reward_min']:.0f}, "
              f"{ev['episode_reward_max']:.0f}) | {ope['v_target']:.1f} / {ope['v_behavior']:.1f} "
              f"| {time.perf_counter() - start:.0f} |", flush=True)


if __name__ == "__main__":
    main()
