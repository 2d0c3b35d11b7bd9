"""What an RLModule costs against rlmesh's own model doing the same math, measured in the
same process (issue 53).

``python -m tests.benchmarks.bench_rl_module [--rounds R]``

Both sides are PPO on CartPole-shaped data with the same network: rlmesh's default
actor-critic MLP (two tanh trunks of 64, ``vf_share_layers`` off). The module side is that
same network inside an RLModule (``DefaultPPOTorchRLModule`` subclassed, so that the
policy goes through the module's passes: ``policy/module_model.py``). Measured:

- ``update``: the learner's PPO update of a 4,096-step time-major batch (GAE, 10 epochs
  of 512-sample minibatches; ``Learner.update_from_batch``), env samples per second;
- ``act_torch``: ``compute_actions`` on 8 observations in torch (where a module's runners
  act), calls per second;
- ``act_runner``: the same call with the runner class each side gets: the default model
  acts in numpy (``NumpyMLPPolicy``), a module in torch. What a user pays on the runners
  for writing a module.

Each row prints the median of interleaved rounds of both sides and the ratio module /
default (1.00: no cost). Wall-clock time; both sides run in turns.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable

import numpy as np
import torch

from rlmesh.algorithms.ppo import PPOConfig, PPOTorchPolicy
from rlmesh.core.rl_module.rl_module import RLModuleSpec
from rlmesh.models.default_modules import DefaultPPOTorchRLModule
from rlmesh.policy.numpy_mlp import NumpyMLPPolicy
from rlmesh.roles.env_runner import default_policy_specs
from rlmesh.roles.learner import Learner
from tests.benchmarks.bench_ppo_learner import ACT, OBS, PPO_POLICY, fragment


class SameNetworkModule(DefaultPPOTorchRLModule):
    """PPO's default network as a user's module (a subclass runs through the passes)."""


def config(module: bool) -> PPOConfig:
    cfg = PPOConfig().training(num_epochs=10, minibatch_size=512, train_batch_size=4096,
                               model={"fcnet_hiddens": [64, 64], "vf_share_layers": False})
    if module:
        cfg.rl_module(rl_module_spec=RLModuleSpec(module_class=SameNetworkModule))
    cfg.policy_class = PPO_POLICY
    return cfg


def update_call(module: bool) -> Callable[[], Any]:
    batch = fragment(64, 64)
    learner = Learner(config(module), default_policy_specs(OBS, ACT, config(module)))
    return lambda: learner.update_from_batch(batch, timesteps=0)


def act_call(module: bool, runner_class: bool) -> Callable[[], Any]:
    cfg = config(module)
    cls = (NumpyMLPPolicy if runner_class and not module else PPOTorchPolicy)
    policy = cls(OBS, ACT, cfg)
    obs = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
    return lambda: policy.compute_actions(obs)


def rate(fn: Callable[[], Any], seconds: float) -> float:
    fn()  # warm
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        fn()
        n += 1
    return n / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = {
        "update (samples/s)": (update_call(False), update_call(True), 4096),
        "act_torch (calls/s)": (act_call(False, False), act_call(True, False), 1),
        "act_runner (calls/s)": (act_call(False, True), act_call(True, True), 1),
    }
    print(f"{'row':24s} {'default':>12s} {'module':>12s} {'module/default':>15s}")
    for name, (default, module, scale) in rows.items():
        a, b = [], []
        for _ in range(args.rounds):
            a.append(rate(default, args.seconds) * scale)
            b.append(rate(module, args.seconds) * scale)
        ma, mb = statistics.median(a), statistics.median(b)
        print(f"{name:24s} {ma:12,.0f} {mb:12,.0f} {mb / ma:14.2f}x   "
              f"(default {min(a):,.0f}-{max(a):,.0f}, module {min(b):,.0f}-{max(b):,.0f})")


if __name__ == "__main__":
    main()
