"""The cost of one PPO gradient step in the learner (``TorchPolicy``'s minibatch SGD) against
bare torch doing the same step on the same nets, measured in the same process (issue 16).

``python -m tests.benchmarks.bench_grad_step [--rounds 15]``: for PPO's defaults (minibatch
128) and the tuned CartPole example (minibatch 384), both on [64, 64] tanh trunks, ms per
step and the ratio to bare torch. CPU time of this process (``time.process_time``), median
of interleaved rounds, one torch thread (as the learner runs): other jobs on a loaded
machine inflate both sides alike instead of whichever ran during a burst.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlmesh.algorithms.ppo import PPOConfig, PPOTorchPolicy

OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
ACT = gym.spaces.Discrete(2)


def samples(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Flat PPO train samples for CartPole's spaces (what ``prepare_batch`` returns)."""
    rng = np.random.default_rng(seed)
    return {"obs": rng.normal(size=(n, 4)).astype(np.float32),
            "actions": rng.integers(0, 2, n), "action_logp": np.full(n, -0.69, np.float32),
            "action_dist_inputs": np.zeros((n, 2), np.float32),
            "advantages": rng.normal(size=n).astype(np.float32),
            "value_targets": rng.normal(size=n).astype(np.float32)}


EPOCHS = 10  # an update of PPO's defaults and of cartpole-ppo.yaml


def rlmesh_update(batch: dict[str, np.ndarray], minibatch: int) -> Callable[[], int]:
    """One update of the learner's minibatch SGD (its statistics included); returns the
    number of gradient steps."""
    cfg = PPOConfig().training(minibatch_size=minibatch, num_epochs=EPOCHS, grad_clip=0.5,
                               model={"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh"})
    policy = PPOTorchPolicy(OBS, ACT, cfg).for_learning()
    return lambda: policy.learn_on_batch(batch)["num_grad_updates"]


def bare_update(batch: dict[str, np.ndarray], minibatch: int, clip: float = 0.2) -> Callable[[], int]:
    """The same update written directly in torch: two [64, 64] tanh MLPs, log_softmax,
    the clipped surrogate, the value loss, torch.optim.Adam, clip_grad_norm_."""
    def net(out: int) -> nn.Sequential:
        return nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, out))

    pi, vf = net(2), net(1)
    params = [*pi.parameters(), *vf.parameters()]
    opt = torch.optim.Adam(params, lr=3e-4, foreach=True)
    data = {k: torch.from_numpy(v) for k, v in batch.items()}
    n = len(data["obs"])

    def update() -> int:
        steps = 0
        for idx in (i for _ in range(EPOCHS) for i in torch.randperm(n).split(minibatch)):
            mb = {k: v[idx] for k, v in data.items()}
            logits = torch.log_softmax(pi(mb["obs"]), -1)
            logp = logits.gather(-1, mb["actions"][:, None]).squeeze(-1)
            ratio = torch.exp(logp - mb["action_logp"])
            adv = mb["advantages"]
            policy_loss = -torch.min(adv * ratio, adv * ratio.clamp(1 - clip, 1 + clip)).mean()
            vf_loss = (vf(mb["obs"]).squeeze(-1) - mb["value_targets"]).pow(2).mean()
            opt.zero_grad()
            (policy_loss + 0.5 * vf_loss).backward()
            nn.utils.clip_grad_norm_(params, 0.5, foreach=True)
            opt.step()
            steps += 1
        return steps

    return update


def cpu_ms_rounds(fns: dict[str, Callable[[], int]], rounds: int, reps: int = 3
                  ) -> dict[str, list[float]]:
    """Each update's CPU ms per gradient step, one figure per interleaved round (each
    function returns the gradient steps it made)."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():
        fn()  # warm up
    for _ in range(rounds):
        for name, fn in fns.items():
            start, steps = time.process_time(), 0
            for _ in range(reps):
                steps += fn()
            times[name].append((time.process_time() - start) / steps * 1e3)
    return times


def ms_per_step(fns: dict[str, Callable[[], int]], rounds: int, reps: int = 3) -> dict[str, float]:
    """Median over interleaved rounds of each update's CPU ms per gradient step."""
    return {k: statistics.median(v) for k, v in cpu_ms_rounds(fns, rounds, reps).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for label, n, minibatch in (("defaults", 2048, 128), ("cartpole-ppo.yaml", 768, 384)):
        batch = samples(n)
        ms = ms_per_step({"rlmesh": rlmesh_update(batch, minibatch),
                          "bare torch": bare_update(batch, minibatch)}, args.rounds, reps=1)
        print(f"{label}: minibatch {minibatch}: rlmesh {ms['rlmesh']:.2f} ms/step, bare torch "
              f"{ms['bare torch']:.2f} ms/step, ratio {ms['rlmesh'] / ms['bare torch']:.2f}",
              flush=True)


if __name__ == "__main__":
    main()
