"""The cost of one CQL or IQL gradient step at batch 256 with [256, 256] networks, SAC's
beside them, through the policies' ``update`` (the learner's entry point) on one torch
thread, as the learner runs (issue 35; docs/offline.md, "CQL and IQL").

``python -m tests.benchmarks.bench_cql_iql_step [--obs 3] [--act 1] [--k 40] [--rounds 3]``:
ms per gradient step, best of ``--rounds`` calls of ``--k`` steps (Pendulum's shapes by
default; ``--obs 11 --act 3`` for Hopper's). Measured, never asserted.
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np
import torch

from rlmesh.algorithms.cql import CQLTorchPolicy
from rlmesh.algorithms.cql_config import CQLConfig
from rlmesh.algorithms.iql import IQLTorchPolicy
from rlmesh.algorithms.iql_config import IQLConfig
from rlmesh.algorithms.sac import SACConfig, SACTorchPolicy

DATA = "unused"  # the policies alone are timed: no dataset is read


def batch(k: int, b: int, obs: int, act: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"obs": rng.normal(size=(k, b, obs)).astype(np.float32),
            "next_obs": rng.normal(size=(k, b, obs)).astype(np.float32),
            "actions": rng.uniform(-1, 1, (k, b, act)).astype(np.float32),
            "rewards": rng.normal(size=(k, b)).astype(np.float32),
            "terminateds": np.zeros((k, b), bool),
            "discounts": np.full((k, b), 0.99, np.float32),
            "weights": np.ones((k, b), np.float32)}


def ms_per_step(policy, data: dict[str, np.ndarray], rounds: int) -> float:
    policy.update({key: v[:2] for key, v in data.items()}, 0)  # warm-up
    k, best = len(data["rewards"]), float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        policy.update(data, 0)
        best = min(best, (time.perf_counter() - start) / k * 1e3)
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--obs", type=int, default=3)
    p.add_argument("--act", type=int, default=1)
    p.add_argument("--k", type=int, default=40)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--bf16", action="store_true", help="also CQL under torch_autocast 'bf16' "
                   "(AMX or AVX512-BF16 CPUs run its large critic pass in bfloat16)")
    args = p.parse_args()
    torch.set_num_threads(1)  # the learner's default (num threads "auto")
    obs = gym.spaces.Box(-10, 10, (args.obs,), np.float32)
    act = gym.spaces.Box(-1, 1, (args.act,), np.float32)
    data = batch(args.k, 256, args.obs, args.act)
    cases = [(f"CQL num_actions={n}", CQLTorchPolicy, CQLConfig().training(
        num_actions=n, bc_iters=0).offline_data(input=DATA)) for n in (10, 4)]
    if args.bf16:
        cases += [(f"CQL num_actions={n}, bf16", CQLTorchPolicy, CQLConfig().training(
            num_actions=n, bc_iters=0).offline_data(input=DATA).learners(torch_autocast="bf16"))
            for n in (10, 4)]
    cases += [("IQL", IQLTorchPolicy, IQLConfig().offline_data(input=DATA)),
              ("SAC", SACTorchPolicy, SACConfig())]
    print("| update | ms per gradient step |\n| --- | --- |")
    for name, cls, config in cases:
        policy = cls(obs, act, config).for_learning()
        print(f"| {name} | {ms_per_step(policy, data, args.rounds):.1f} |", flush=True)


if __name__ == "__main__":
    main()
