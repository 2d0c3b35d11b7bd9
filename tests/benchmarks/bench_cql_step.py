"""CQL's gradient step against the same CQL loss written in bare torch (issue 54), on
HalfCheetah's shapes (17 observations, 6 actions in [-1, 1]), batch 256, [256, 256] ReLU
networks, ``num_actions`` 10 (the paper's), rlmesh's CQL defaults otherwise (``min_q_weight``
5, temperature 1, deterministic backup, no Lagrangian) with ``bc_iters=0`` (the actor's loss of
every step after the first 20,000: SAC's). One torch thread, CPU time per gradient step, the
median of interleaved rounds; SAC's step from the same run for scale.

``python -m tests.benchmarks.bench_cql_step [--rounds 7] [--steps 8] [--num-actions 10]``

The bare step is laid out as CORL's continuous CQL: a plain ``nn.Sequential`` actor and two
critics (and their targets), three Adams; the conservative term's policy actions drawn by the
actor on the states repeated ``num_actions`` times (a second bare row runs the actor once per
state and repeats its outputs, as rlmesh does: the same distribution), each critic run once
per source (random actions, pi(s), pi(s')) on the repeated states, logsumexp over the
3 x num_actions scores less their log-densities; the actor's, the temperature's and the
critics' losses each backpropagated and stepped. rlmesh's is ``CQLTorchPolicy.update`` fed
``[K, B]`` batches, as the learner does. Measured, never asserted: ratio = rlmesh's speed /
bare torch's (above 1: rlmesh faster).
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import statistics
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rlmesh.algorithms.cql import CQLTorchPolicy
from rlmesh.algorithms.cql_config import CQLConfig
from rlmesh.algorithms.sac import SACConfig, SACTorchPolicy

from .bench_grad_step import cpu_ms_rounds

OBS_DIM, ACT_DIM, BATCH, HIDDEN, DATASET = 17, 6, 256, 256, 50_000
OBS = gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
ACT = gym.spaces.Box(-1.0, 1.0, (ACT_DIM,), np.float32)
NET = {"fcnet_hiddens": [HIDDEN, HIDDEN], "fcnet_activation": "relu"}
DATA = "unused"  # the policies alone are timed: no dataset is read


def dataset(n: int = DATASET, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n, OBS_DIM)).astype(np.float32)
    return {"obs": obs, "actions": rng.uniform(-1, 1, (n, ACT_DIM)).astype(np.float32),
            "rewards": rng.normal(size=n).astype(np.float32),
            "next_obs": obs + rng.normal(0, 0.05, (n, OBS_DIM)).astype(np.float32),
            "terminateds": rng.random(n) < 0.001, "discounts": np.full(n, 0.99, np.float32)}


def rlmesh_call(policy, k: int) -> Callable[[], int]:
    """``k`` gradient steps through ``policy.update`` on minibatches drawn from a dataset."""
    data, rng = dataset(), np.random.default_rng(1)

    def call() -> int:
        idx = rng.integers(0, DATASET, (k, BATCH))
        policy.update({key: v[idx] for key, v in data.items()}, 50_000)
        return k

    return call


def cql_policy(num_actions: int) -> CQLTorchPolicy:
    cfg = CQLConfig().training(num_actions=num_actions, bc_iters=0, q_model_config=NET,
                               policy_model_config=NET).offline_data(input=DATA)
    return CQLTorchPolicy(OBS, ACT, cfg).for_learning()


def sac_policy() -> SACTorchPolicy:
    cfg = SACConfig().training(train_batch_size=BATCH, q_model_config=NET,
                               policy_model_config=NET)
    return SACTorchPolicy(OBS, ACT, cfg).for_learning()


def mlp(inputs: int, outputs: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inputs, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN),
                         nn.ReLU(), nn.Linear(HIDDEN, outputs))


class BareCQL:
    """rlmesh's CQL loss with its defaults, written directly in torch (see the module doc)."""

    def __init__(self, num_actions: int, draw_once: bool = False, min_q_weight: float = 5.0,
                 temperature: float = 1.0, gamma: float = 0.99, tau: float = 0.005):
        self.k, self.weight, self.temp, self.gamma, self.tau = (num_actions, min_q_weight,
                                                                temperature, gamma, tau)
        self.draw_once = draw_once  # the actor once per state, its outputs repeated
        self.actor = mlp(OBS_DIM, 2 * ACT_DIM)
        self.critics = [mlp(OBS_DIM + ACT_DIM, 1), mlp(OBS_DIM + ACT_DIM, 1)]
        self.targets = copy.deepcopy(self.critics)
        self.critic_params = [p for q in self.critics for p in q.parameters()]
        self.target_params = [p for q in self.targets for p in q.parameters()]
        self.log_alpha = torch.zeros((), requires_grad=True)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=1e-4)
        self.critic_opt = torch.optim.Adam(self.critic_params, lr=3e-4)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=1e-4)
        self.target_entropy = -float(ACT_DIM)
        self.log_uniform = -ACT_DIM * math.log(2.0)  # uniform density on [-1, 1]^6

    def policy(self, obs: torch.Tensor, repeat: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
        """A tanh-squashed Gaussian sample and its log-density; ``repeat`` samples per state
        (each state's row repeated before the actor, as CORL, or after it, ``draw_once``)."""
        if repeat > 1 and not self.draw_once:
            obs = obs.repeat_interleave(repeat, 0)
        inputs = self.actor(obs)
        if repeat > 1 and self.draw_once:
            inputs = inputs.repeat_interleave(repeat, 0)
        mean, log_std = inputs.chunk(2, -1)
        log_std = log_std.clamp(-20.0, 2.0)
        u = mean + log_std.exp() * torch.randn_like(mean)
        logp = (-0.5 * ((u - mean) / log_std.exp()).pow(2) - log_std
                - 0.5 * math.log(2 * math.pi)).sum(-1)
        logp = logp - (2 * (math.log(2) - u - F.softplus(-2 * u))).sum(-1)
        return torch.tanh(u), logp

    @staticmethod
    def q(critic: nn.Module, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return critic(torch.cat([obs, actions], -1)).squeeze(-1)

    def step(self, obs, actions, rewards, next_obs, discounts) -> None:
        b, k = len(obs), self.k
        alpha = self.log_alpha.exp().detach()
        # The actor: SAC's loss; the temperature toward the target entropy.
        pi, logp = self.policy(obs)
        q_pi = torch.min(*(self.q(c, obs, pi) for c in self.critics))
        actor_loss = (alpha * logp - q_pi).mean()
        alpha_loss = (self.log_alpha * (-logp.detach() - self.target_entropy)).mean()
        # The critics: TD toward r + gamma min Q'(s', a'), a' ~ pi(s') (deterministic backup).
        with torch.no_grad():
            next_a, _ = self.policy(next_obs)
            next_q = torch.min(*(self.q(c, next_obs, next_a) for c in self.targets))
            target = rewards + discounts * next_q
            repeated = obs.repeat_interleave(k, 0)
            random = torch.empty(b * k, ACT_DIM).uniform_(-1.0, 1.0)
            cur_a, cur_logp = self.policy(obs, k)
            nxt_a, nxt_logp = self.policy(next_obs, k)
        critic_loss = 0.0
        for critic in self.critics:
            q_data = self.q(critic, obs, actions)
            scores = torch.cat([(self.q(critic, repeated, random) - self.log_uniform).view(b, k),
                                (self.q(critic, repeated, cur_a) - cur_logp).view(b, k),
                                (self.q(critic, repeated, nxt_a) - nxt_logp).view(b, k)], 1)
            gap = (self.temp * torch.logsumexp(scores / self.temp, 1)).mean() - q_data.mean()
            critic_loss = critic_loss + F.mse_loss(q_data, target) + self.weight * gap
        for opt, loss in ((self.alpha_opt, alpha_loss), (self.actor_opt, actor_loss),
                          (self.critic_opt, critic_loss)):
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            torch._foreach_lerp_(self.target_params, self.critic_params, self.tau)


def bare_call(num_actions: int, k: int, draw_once: bool = False) -> Callable[[], int]:
    learner = BareCQL(num_actions, draw_once)
    data = {key: torch.from_numpy(v) for key, v in dataset().items()}
    discount = (~data["terminateds"]).float() * data["discounts"]

    def call() -> int:
        for _ in range(k):
            idx = torch.randint(0, DATASET, (BATCH,))
            learner.step(data["obs"][idx], data["actions"][idx], data["rewards"][idx],
                         data["next_obs"][idx], discount[idx])
        return k

    return call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=8, help="gradient steps per round")
    parser.add_argument("--k", type=int, default=4, help="gradient steps per update call")
    parser.add_argument("--num-actions", type=int, default=10)
    parser.add_argument("--no-sac", action="store_true", help="leave SAC's row out")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    k = min(args.k, args.steps)
    fns = {"rlmesh CQL": rlmesh_call(cql_policy(args.num_actions), k),
           "bare torch CQL": bare_call(args.num_actions, k),
           "bare torch CQL, actor once per state": bare_call(args.num_actions, k, True)}
    if not args.no_sac:
        fns["rlmesh SAC"] = rlmesh_call(sac_policy(), k)
    times = cpu_ms_rounds(fns, args.rounds, max(1, args.steps // k))
    ms = {name: statistics.median(v) for name, v in times.items()}
    print(f"CQL step, num_actions {args.num_actions}, batch {BATCH}, [{HIDDEN}, {HIDDEN}], "
          f"obs {OBS_DIM} act {ACT_DIM}, 1 torch thread, median of {args.rounds} rounds "
          f"(load average {os.getloadavg()[0]:.2f})")
    print("| step | CPU ms per gradient step (median) | range | vs bare torch CQL |")
    print("| --- | --- | --- | --- |")
    bare = ms["bare torch CQL"]
    for name, v in ms.items():
        print(f"| {name} | {v:.1f} | {min(times[name]):.1f}-{max(times[name]):.1f} | "
              f"{bare / v:.2f}x speed |", flush=True)
    print(f"ratio (rlmesh CQL speed / bare torch CQL speed): {bare / ms['rlmesh CQL']:.2f}; "
          f"against the bare step drawing from the actor once per state (as rlmesh): "
          f"{ms['bare torch CQL, actor once per state'] / ms['rlmesh CQL']:.2f}")


if __name__ == "__main__":
    main()
