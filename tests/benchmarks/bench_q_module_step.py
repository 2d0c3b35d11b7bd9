"""What a user's RLModule costs DQN against DQN's own network (issue 53): the same layers
(a subclass of DefaultDQNTorchRLModule wraps the very QModel DQN builds) reached through
``policy/q_module_model.py``'s adapter and the module's dict-in dict-out passes.

``python -m tests.benchmarks.bench_q_module_step [--rounds 7]``: in one process on one torch
thread, interleaved rounds of (a) K gradient steps (``policy.update`` on a [K, B] replay
batch) and (b) acting on one observation in torch (``compute_actions``, the torch runner's
path; DQN's own network on a flat observation acts in numpy instead, ``numpy_q.py``) for
each network; prints CPU ms per gradient step / us per action of each and the module's
ratio to DQN's own network (median and the range over rounds).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import numpy as np
import torch

from rlmesh.algorithms.dqn import DQNConfig, DQNTorchPolicy, QModel
from rlmesh.algorithms.dqn.torch.default_dqn_torch_rl_module import DefaultDQNTorchRLModule
from rlmesh.core.rl_module.rl_module import RLModuleSpec
from rlmesh.policy.q_module_model import QModuleModel

from .bench_dqn_step import ACT, BATCH, OBS, transitions

K = 32
SETTINGS = {"lr": 1e-3, "train_batch_size": BATCH, "double_q": True, "dueling": True,
            "hiddens": [256], "model": {"fcnet_hiddens": [256, 256]}}


class SameNetwork(DefaultDQNTorchRLModule):
    """DQN's own QModel, as a user's module (a subclass is not folded into QModel)."""


def policy(module: bool) -> DQNTorchPolicy:
    config = DQNConfig().environment("CartPole-v1").training(**SETTINGS)
    if module:
        config = config.rl_module(rl_module_spec=RLModuleSpec(module_class=SameNetwork))
    p = DQNTorchPolicy(OBS, ACT, config).for_learning()
    assert isinstance(p.model, QModuleModel if module else QModel)
    return p


def learn_call(p: DQNTorchPolicy) -> Callable[[], int]:
    t = transitions(K * BATCH)
    batch = {k: v.reshape(K, BATCH, *v.shape[1:]) for k, v in t.items()}
    batch["weights"] = np.ones((K, BATCH), np.float32)

    def call() -> int:
        return p.update(batch, 50_000)["num_grad_updates"]

    return call


def act_call(p: DQNTorchPolicy, n: int = 500) -> Callable[[], int]:
    obs = np.random.default_rng(0).normal(size=(1, 4)).astype(np.float32)

    def call() -> int:
        for _ in range(n):
            p.compute_actions(obs, explore=True)
        return n

    return call


def per_unit(fns: dict[str, Callable[[], int]], rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():
        fn()  # warm up
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.process_time()
            units = fn()
            times[name].append((time.process_time() - start) / units)
    return times


def report(what: str, unit: str, scale: float, times: dict[str, list[float]]) -> None:
    own, mod = times["own"], times["module"]
    ratios = [m / o for m, o in zip(mod, own)]
    print(f"{what}: DQN's network {statistics.median(own) * scale:.3f} {unit}, as a user's "
          f"module {statistics.median(mod) * scale:.3f} {unit}: {statistics.median(ratios):.3f}x "
          f"(rounds {min(ratios):.3f}-{max(ratios):.3f}x)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    own, module = policy(False), policy(True)
    own_params = sum(p.numel() for p in own.model.parameters())
    assert own_params == sum(p.numel() for p in module.model.parameters())
    learn = per_unit({"own": learn_call(own), "module": learn_call(module)}, args.rounds)
    report("gradient step", "ms", 1e3, learn)
    act = per_unit({"own": act_call(own), "module": act_call(module)}, args.rounds)
    report("acting on 1 obs in torch", "us", 1e6, act)


if __name__ == "__main__":
    main()
