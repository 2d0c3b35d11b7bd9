"""What a user's RLModule costs DQN and SAC against their own networks (issue 53): the same
layers (a subclass of DefaultDQNTorchRLModule wraps the very QModel DQN builds; one of
DefaultSACTorchRLModule SAC's actor and twin Q) reached through ``policy/q_module_model.py``'s
and ``policy/sac_module_model.py``'s adapters and the module's dict-in dict-out passes.

``python -m tests.benchmarks.bench_q_module_step [--rounds 7]``: in one process on one torch
thread, interleaved rounds of (a) K gradient steps (``policy.update`` on a [K, B] replay
batch) and (b) acting on one observation in torch (``compute_actions``, the torch runner's
path; DQN's own network on a flat observation acts in numpy instead, ``numpy_q.py``) for
each network, then SAC's gradient step (Pendulum's spaces, [256, 256]); prints CPU ms per
gradient step / us per action of each and the module's ratio to the algorithm's own network
(median and the range over rounds).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import gymnasium as gym
import numpy as np
import torch

from rlmesh.algorithms.dqn import DQNConfig, DQNTorchPolicy, QModel
from rlmesh.algorithms.dqn.torch.default_dqn_torch_rl_module import DefaultDQNTorchRLModule
from rlmesh.algorithms.sac import SACConfig, SACTorchPolicy
from rlmesh.algorithms.sac.torch.default_sac_torch_rl_module import DefaultSACTorchRLModule
from rlmesh.core.rl_module.rl_module import RLModuleSpec
from rlmesh.policy.q_module_model import QModuleModel
from rlmesh.policy.sac_module_model import SACModuleModel

from .bench_dqn_step import ACT, BATCH, OBS, transitions

K = 32
SETTINGS = {"lr": 1e-3, "train_batch_size": BATCH, "double_q": True, "dueling": True,
            "hiddens": [256], "model": {"fcnet_hiddens": [256, 256]}}


class SameNetwork(DefaultDQNTorchRLModule):
    """DQN's own QModel, as a user's module (a subclass is not folded into QModel)."""


class SameSAC(DefaultSACTorchRLModule):
    """SAC's own actor and twin Q, as a user's module."""


SAC_OBS = gym.spaces.Box(-8.0, 8.0, (3,), np.float32)
SAC_ACT = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)


def sac_policy(module: bool) -> SACTorchPolicy:
    config = SACConfig().environment("Pendulum-v1").training(train_batch_size=BATCH)
    if module:
        config = config.rl_module(rl_module_spec=RLModuleSpec(module_class=SameSAC))
    p = SACTorchPolicy(SAC_OBS, SAC_ACT, config).for_learning()
    assert isinstance(p.model, SACModuleModel) == module
    return p


def sac_learn_call(p: SACTorchPolicy) -> Callable[[], int]:
    rng = np.random.default_rng(0)
    n = K * BATCH
    obs = rng.normal(size=(n, 3)).astype(np.float32)
    t = {"obs": obs, "next_obs": obs + rng.normal(0, 0.05, (n, 3)).astype(np.float32),
         "actions": rng.uniform(-2, 2, (n, 1)).astype(np.float32),
         "rewards": rng.normal(size=n).astype(np.float32),
         "terminateds": np.zeros(n, bool), "discounts": np.full(n, 0.99, np.float32)}
    batch = {k: v.reshape(K, BATCH, *v.shape[1:]) for k, v in t.items()}

    def call() -> int:
        return p.update(batch, 50_000)["num_grad_updates"]

    return call


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
    print(f"{what}: own network {statistics.median(own) * scale:.3f} {unit}, as a user's "
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
    report("DQN gradient step", "ms", 1e3, learn)
    act = per_unit({"own": act_call(own), "module": act_call(module)}, args.rounds)
    report("DQN acting on 1 obs in torch", "us", 1e6, act)
    own_sac, module_sac = sac_policy(False), sac_policy(True)
    sac = per_unit({"own": sac_learn_call(own_sac), "module": sac_learn_call(module_sac)},
                   args.rounds)
    report("SAC gradient step", "ms", 1e3, sac)


if __name__ == "__main__":
    main()
