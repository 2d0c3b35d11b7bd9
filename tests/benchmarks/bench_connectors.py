"""What env-to-module connectors cost a runner's sampling: an EnvSampler stepping 8
CartPoles with a trivial policy (so that the connectors' share shows), env steps/s without
connectors (the reference, measured in the same run, interleaved) and with RLlib's usual
pipelines; printed as ratios to the reference. Measured, never asserted.

``python -m tests.benchmarks.bench_connectors [--rounds 5] [--steps 250]``
"""

from __future__ import annotations

import argparse
import statistics
import time

import gymnasium as gym
import numpy as np

from rlmesh.algorithms import PPOConfig
from rlmesh.connectors.env_to_module import (FlattenObservations, FrameStackingEnvToModule,
                                             MeanStdFilter, PrevActionsPrevRewards)
from rlmesh.policy.policy import Policy
from rlmesh.rl.columns import action_dist_columns
from rlmesh.roles.env_sampler import EnvSampler
from rlmesh.roles.runner_sampler import runner_connectors

NUM_ENVS = 8


class Lean(Policy):
    """Acts by the pole's angle: no network, so the sampler's own cost is what shows."""

    def __init__(self) -> None:
        super().__init__(None, None, None)
        self.view_requirements = action_dist_columns(2)

    def compute_actions(self, obs_batch, state_batches=None, prev_action_batch=None,
                        prev_reward_batch=None, explore=None, timestep=None, **kwargs):
        n = len(obs_batch)
        return ((np.asarray(obs_batch)[:, 2] > 0).astype(np.int64), [],
                {"action_logp": np.zeros(n, np.float32),
                 "action_dist_inputs": np.zeros((n, 2), np.float32)})


PIPELINES = {
    "none (reference)": None,
    "PrevActionsPrevRewards + FlattenObservations":
        lambda env: [PrevActionsPrevRewards(), FlattenObservations()],
    "MeanStdFilter": lambda env: MeanStdFilter(),
    "FrameStackingEnvToModule(4)": lambda env: FrameStackingEnvToModule(num_frames=4),
}


def sampler(factory) -> EnvSampler:
    s = EnvSampler(lambda i: gym.make("CartPole-v1"), NUM_ENVS, Lean(),
                   seeds=list(range(NUM_ENVS)))
    if factory is not None:
        s.use_connectors(runner_connectors(
            PPOConfig().env_runners(env_to_module_connector=factory), s))
    s.sample(20)  # resets and first calls (the output check) out of the timing
    return s


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.bench_connectors")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=250, help="rows per fragment")
    args = parser.parse_args()
    samplers = {name: sampler(f) for name, f in PIPELINES.items()}
    rates: dict[str, list[float]] = {name: [] for name in PIPELINES}
    for _ in range(args.rounds):  # interleaved, so that a busy moment hits every row
        for name, s in samplers.items():
            t = time.perf_counter()
            fragment = s.sample(args.steps)
            rates[name].append(fragment["env_steps"] / (time.perf_counter() - t))
    ref = statistics.median(rates["none (reference)"])
    print(f"EnvSampler, {NUM_ENVS} CartPoles, fragments of {args.steps} rows, "
          f"{args.rounds} rounds (median, [min, max])")
    print("| env_to_module_connector | env steps/s | ratio to none |")
    print("|---|---:|---:|")
    for name, r in rates.items():
        med = statistics.median(r)
        print(f"| {name} | {med:,.0f} [{min(r):,.0f}, {max(r):,.0f}] | {med / ref:.2f}x |")


if __name__ == "__main__":
    main()
