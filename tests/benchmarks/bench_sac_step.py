"""The cost of one SAC or TD3 gradient step on HalfCheetah-v5's shapes (17 observations, 6
actions, [256, 256] ReLU nets, batch 256): rlmesh's learner as the driver pays it (replay
sample, columns to tensors, the policy's ``update``), the same update written in bare torch
(CleanRL's layout: separate actor and critics, three optimizers), and stable-baselines3's
``SAC.train`` / ``TD3.train``, in one process on one torch thread (issue 35).

``python -m tests.benchmarks.bench_sac_step [--rounds 7] [--k 4]``: CPU ms per gradient step,
median of interleaved rounds (``--threads``: wall ms instead), ``--k`` gradient steps per call (what the tuned examples' 4-step
fragments owe; SB3 with rl-zoo's ``train_freq 1`` takes one per call). SB3 is imported from the
peers' venv (``make bench-peers``) on rlmesh's torch; without it its rows are left out.
"""

from __future__ import annotations

import argparse
import copy
import glob
import math
import statistics
import sys
import time
from typing import Callable

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlmesh.algorithms.off_policy import make_replay
from rlmesh.algorithms.sac import SACConfig, SACTorchPolicy
from rlmesh.algorithms.ddpg import DDPGTorchPolicy
from rlmesh.algorithms.td3 import TD3Config

from .bench_runtime import ROOT

OBS = gym.spaces.Box(-np.inf, np.inf, (17,), np.float32)
ACT = gym.spaces.Box(-1.0, 1.0, (6,), np.float32)
CAPACITY, BATCH, HIDDEN = 100_000, 256, [256, 256]
NET = {"fcnet_hiddens": HIDDEN, "fcnet_activation": "relu"}
SAC_SETTINGS = {"train_batch_size": BATCH, "gamma": 0.99, "tau": 0.005, "n_step": 1,
                "replay_buffer_config": {"type": "MultiAgentReplayBuffer", "capacity": CAPACITY},
                "q_model_config": NET, "policy_model_config": NET}
TD3_SETTINGS = {"train_batch_size": BATCH, "gamma": 0.99, "tau": 0.005, "n_step": 1,
                "replay_buffer_config": {"type": "MultiAgentReplayBuffer", "capacity": CAPACITY},
                "actor_hiddens": HIDDEN, "critic_hiddens": HIDDEN}


def transitions(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n, 17)).astype(np.float32)
    return {"obs": obs, "actions": rng.uniform(-1, 1, (n, 6)).astype(np.float32),
            "rewards": rng.normal(size=n).astype(np.float32),
            "next_obs": obs + rng.normal(0, 0.05, (n, 17)).astype(np.float32),
            "terminateds": rng.random(n) < 0.001, "discounts": np.full(n, 0.99, np.float32)}


def rlmesh_call(algo: str, k: int) -> Callable[[], int]:
    """What ``OffPolicy`` does for one round of ``k`` owed steps, on the learner in-process."""
    if algo == "sac":
        cfg = SACConfig().environment("Pendulum-v1").update_from_dict(SAC_SETTINGS)
        policy = SACTorchPolicy(OBS, ACT, cfg).for_learning()
    else:
        cfg = TD3Config().environment("Pendulum-v1").update_from_dict(TD3_SETTINGS)
        policy = DDPGTorchPolicy(OBS, ACT, cfg).for_learning()
    replay = make_replay(cfg, OBS, ACT)
    replay.add(transitions(CAPACITY))

    def call() -> int:
        sample = replay.sample(k * BATCH)
        batch = {key: v.reshape(k, BATCH, *v.shape[1:]) for key, v in sample.items()}
        return policy.update(batch, 50_000)["num_grad_updates"]

    return call


def mlp(inputs: int, outputs: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inputs, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                         nn.Linear(256, outputs))


def bare_sac(k: int) -> Callable[[], int]:
    """SAC's update as a CleanRL-style script writes it: a tanh-squashed Gaussian actor, two
    critics and their targets, automatic entropy tuning, actor and alpha stepped every step."""
    actor, q1, q2 = mlp(17, 12), mlp(23, 1), mlp(23, 1)
    q1_t, q2_t = copy.deepcopy(q1), copy.deepcopy(q2)
    q_params = [*q1.parameters(), *q2.parameters()]
    target_params = [*q1_t.parameters(), *q2_t.parameters()]
    log_alpha = torch.zeros(1, requires_grad=True)
    q_opt = torch.optim.Adam(q_params, lr=3e-4)
    actor_opt = torch.optim.Adam(actor.parameters(), lr=3e-4)
    alpha_opt = torch.optim.Adam([log_alpha], lr=3e-4)
    data = {key: torch.from_numpy(v) for key, v in transitions(CAPACITY).items()}

    def act(obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = actor(obs).chunk(2, -1)
        std = log_std.clamp(-20, 2).exp()
        u = mean + std * torch.randn_like(mean)
        a = torch.tanh(u)
        logp = (-0.5 * ((u - mean) / std) ** 2 - log_std.clamp(-20, 2)
                - 0.5 * math.log(2 * math.pi)).sum(-1)
        return a, logp - torch.log(1 - a.pow(2) + 1e-6).sum(-1)

    def call() -> int:
        for _ in range(k):
            idx = torch.randint(0, CAPACITY, (BATCH,))
            obs, actions, next_obs = data["obs"][idx], data["actions"][idx], data["next_obs"][idx]
            alpha = log_alpha.exp().detach()
            with torch.no_grad():
                next_a, next_logp = act(next_obs)
                sa = torch.cat([next_obs, next_a], -1)
                next_q = torch.min(q1_t(sa), q2_t(sa)).squeeze(-1) - alpha * next_logp
                target = data["rewards"][idx] + data["discounts"][idx] * next_q
            sa = torch.cat([obs, actions], -1)
            q_loss = (F_mse(q1(sa), target) + F_mse(q2(sa), target))
            q_opt.zero_grad()
            q_loss.backward()
            q_opt.step()
            a, logp = act(obs)
            sa = torch.cat([obs, a], -1)
            actor_loss = (alpha * logp - torch.min(q1(sa), q2(sa)).squeeze(-1)).mean()
            actor_opt.zero_grad()
            actor_loss.backward()
            actor_opt.step()
            alpha_loss = -(log_alpha * (logp.detach() - 6.0)).mean()
            alpha_opt.zero_grad()
            alpha_loss.backward()
            alpha_opt.step()
            with torch.no_grad():
                torch._foreach_lerp_(target_params, q_params, 0.005)
        return k

    return call


def F_mse(q: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return (q.squeeze(-1) - target).pow(2).mean()


def sb3_call(algo: str, k: int) -> Callable[[], int] | None:
    """SB3's SAC/TD3 ``train(gradient_steps=k)`` on a full buffer; None without its venv."""
    site = glob.glob(str(ROOT / ".venv-peers" / "lib" / "python*" / "site-packages"))
    if not site:
        return None
    if site[0] not in sys.path:
        sys.path.append(site[0])  # after rlmesh's own: its torch and numpy are used
    from stable_baselines3 import SAC, TD3

    class Shapes(gym.Env):  # HalfCheetah-v5's spaces, without needing mujoco in either venv
        observation_space, action_space = OBS, ACT

        def reset(self, seed=None, options=None):  # type: ignore[override]
            return np.zeros(17, np.float32), {}

    cls = SAC if algo == "sac" else TD3
    model = cls("MlpPolicy", Shapes(), learning_rate=3e-4, batch_size=BATCH,
                buffer_size=CAPACITY, policy_kwargs={"net_arch": HIDDEN}, device="cpu", seed=0)
    model._setup_learn(total_timesteps=50_000)  # as learn() does before its first train
    buf, t = model.replay_buffer, transitions(CAPACITY)
    buf.observations[:, 0] = t["obs"]
    buf.next_observations[:, 0] = t["next_obs"]
    buf.actions[:, 0] = t["actions"]
    buf.rewards[:, 0] = t["rewards"]
    buf.dones[:, 0] = t["terminateds"]
    buf.pos, buf.full = 0, True

    def call() -> int:
        model.train(gradient_steps=k, batch_size=BATCH)
        return k

    return call


def ms_per_step(fns: dict[str, Callable[[], int]], rounds: int, reps: int,
                clock: Callable[[], float] = time.process_time) -> dict[str, float]:
    """Median over interleaved rounds of ms per gradient step by ``clock``."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        fn()  # warm up
    for _ in range(rounds):
        for name, fn in fns.items():
            start, steps = clock(), 0
            for _ in range(reps):
                steps += fn()
            times[name].append((clock() - start) / steps * 1e3)
    return {name: statistics.median(v) for name, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--k", type=int, default=4, help="gradient steps per learner call")
    parser.add_argument("--steps", type=int, default=200, help="gradient steps per round")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the learner's "
                        "num_cpus_per_learner; SB3 takes one per core unless told)")
    parser.add_argument("--algos", default="sac,td3")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    reps = max(1, args.steps // args.k)
    for algo in args.algos.split(","):
        fns = {"rlmesh": rlmesh_call(algo, args.k)}
        if algo == "sac":
            fns["bare torch"] = bare_sac(args.k)
        sb3 = sb3_call(algo, 1)
        if sb3 is not None:
            fns["stable-baselines3"] = sb3
        # CPU time counts every thread's: with several, the wall clock is what is gained.
        clock = time.process_time if args.threads == 1 else time.perf_counter
        ms = ms_per_step(fns, args.rounds, reps, clock)
        bare, peer = ms.get("bare torch"), ms.get("stable-baselines3")
        for name, v in ms.items():
            speed = [f"{ref / v:.2f}x {who}'s speed" for who, ref in
                     (("bare torch", bare), ("SB3", peer)) if ref and who != name
                     and not (who == "SB3" and name == "stable-baselines3")]
            print(f"{algo} {name}: {v:.3f} ms per gradient step ({1e3 / v:.0f} updates/s)"
                  + "".join(f"; {r}" for r in speed), flush=True)

if __name__ == "__main__":
    main()
