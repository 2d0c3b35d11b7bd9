"""The cost of one DQN gradient step as the driver pays it (replay sample, columns to tensors,
the learner's ``update``, priorities back) against stable-baselines3's ``DQN.train``, in one
process on one torch thread (issue 18).

``python -m tests.benchmarks.bench_dqn_step [--rounds 7]``: CPU ms per gradient step (batch
64, [256, 256] ReLU, 128 steps a call as rl-zoo's ``gradient_steps``), median of interleaved
rounds, for rlmesh with rl-zoo's settings (plain 1-step DQN, uniform replay: SB3's math),
rlmesh with ``cartpole-dqn.yaml``'s (double Q, dueling, 3-step, prioritized) and SB3 2.9's
DQN with rl-zoo's; ``--before`` adds the example with the step as it was before issue 18's
follow-up (double Q's online pass on cat(obs, next_obs), the multi-tensor Adam), interleaved
with the rest. SB3 is imported from the peers' venv (``make bench-peers``) on rlmesh's
torch (the same version in both venvs).
"""

from __future__ import annotations

import argparse
import glob
import statistics
import sys
import time
from typing import Callable

import gymnasium as gym
import numpy as np
import torch
import yaml

from rlmesh.algorithms.dqn import DQNConfig, DQNTorchPolicy
from rlmesh.algorithms.off_policy import make_replay, replay_beta
from rlmesh.rl import optim

from .bench_runtime import ROOT

OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
ACT = gym.spaces.Discrete(2)
CAPACITY = 100_000
BATCH, K = 64, 128  # rl-zoo: batch_size 64, gradient_steps 128
ZOO = {"lr": 2.3e-3, "train_batch_size": BATCH, "gamma": 0.99, "grad_clip": 10.0,
       "double_q": False, "dueling": False, "hiddens": [], "n_step": 1,
       "target_network_update_freq": 256, "replay_buffer_config": {
           "type": "MultiAgentReplayBuffer", "capacity": CAPACITY},
       "model": {"fcnet_hiddens": [256, 256], "fcnet_activation": "relu"}}


def transitions(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n, 4)).astype(np.float32)
    return {"obs": obs, "actions": rng.integers(0, 2, n), "rewards": np.ones(n, np.float32),
            "next_obs": obs + rng.normal(0, 0.05, (n, 4)).astype(np.float32),
            "terminateds": rng.random(n) < 0.02,
            "discounts": np.full(n, 0.99, np.float32)}


def example_config() -> dict:
    path = ROOT / "rlmesh" / "tuned_examples" / "cartpole-dqn.yaml"
    return next(iter(yaml.safe_load(path.read_text()).values()))["config"]


class OnePassDQN(DQNTorchPolicy):
    """The online Q-values as before: one pass with autograd on cat(obs, next_obs)."""

    def online_q(self, mb: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor | None]:
        if not self.config.double_q:
            return super().online_q(mb)
        n = len(mb["obs"])
        q_all = self.model.q_values(torch.cat([mb["obs"], mb["next_obs"]]))
        return q_all[:n], q_all[n:].detach()


def rlmesh_call(settings: dict, before: bool = False) -> Callable[[], int]:
    """What ``OffPolicy.learn`` does for one round of K steps, on the learner in-process."""
    cfg = DQNConfig().environment("CartPole-v1").update_from_dict(settings)
    policy = (OnePassDQN if before else DQNTorchPolicy)(OBS, ACT, cfg).for_learning()
    replay = make_replay(cfg, OBS, ACT)
    replay.add(transitions(CAPACITY))
    timestep = 50_000

    def call() -> int:
        sample = replay.sample(K * BATCH, beta=replay_beta(cfg, timestep))
        batch = {k: v.reshape(K, BATCH, *v.shape[1:]) for k, v in sample.items()}
        batch.setdefault("weights", np.ones((K, BATCH), np.float32))
        optim.FUSED = not before
        try:
            stats = policy.update(batch, timestep)
        finally:
            optim.FUSED = True
        td = stats["td_error"].reshape(-1)
        ok = np.isfinite(td)
        replay.update_priorities(sample["batch_indexes"][ok], td[ok])
        return stats["num_grad_updates"]

    return call


def sb3_call() -> Callable[[], int] | None:
    """SB3's DQN.train(gradient_steps=K) on a full buffer; None without the peers' venv."""
    site = glob.glob(str(ROOT / ".venv-peers" / "lib" / "python*" / "site-packages"))
    if not site:
        return None
    sys.path.append(site[0])  # after rlmesh's own: its torch and numpy are used
    from stable_baselines3 import DQN

    env = gym.make("CartPole-v1")
    model = DQN("MlpPolicy", env, learning_rate=2.3e-3, batch_size=BATCH, buffer_size=CAPACITY,
                gamma=0.99, policy_kwargs={"net_arch": [256, 256]}, device="cpu", seed=0)
    model._setup_learn(total_timesteps=50_000)  # as learn() does before its first train
    buf, t = model.replay_buffer, transitions(CAPACITY)
    buf.observations[:, 0] = t["obs"]
    buf.next_observations[:, 0] = t["next_obs"]
    buf.actions[:, 0, 0] = t["actions"]
    buf.rewards[:, 0] = t["rewards"]
    buf.dones[:, 0] = t["terminateds"]
    buf.pos, buf.full = 0, True

    def call() -> int:
        model.train(gradient_steps=K, batch_size=BATCH)
        return K

    return call


def ms_per_step(fns: dict[str, Callable[[], int]], rounds: int) -> dict[str, float]:
    """Median over interleaved rounds of CPU ms per gradient step."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():
        fn()  # warm up
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.process_time()
            steps = fn()
            times[name].append((time.process_time() - start) / steps * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--before", action="store_true", help="also the step as it was")
    args = parser.parse_args()
    torch.set_num_threads(1)
    fns = {"rlmesh, rl-zoo's settings": rlmesh_call(ZOO),
           "rlmesh, cartpole-dqn.yaml": rlmesh_call(example_config())}
    if args.before:
        fns["rlmesh, cartpole-dqn.yaml, before"] = rlmesh_call(example_config(), before=True)
        fns["rlmesh, rl-zoo's settings, before"] = rlmesh_call(ZOO, before=True)
    sb3 = sb3_call()
    if sb3 is not None:
        fns["stable-baselines3, rl-zoo's settings"] = sb3
    ms = ms_per_step(fns, args.rounds)
    ref = ms.get("stable-baselines3, rl-zoo's settings")
    for name, v in ms.items():
        ratio = f", {v / ref:.2f}x SB3" if ref else ""
        print(f"{name}: {v:.3f} ms per gradient step{ratio}", flush=True)


if __name__ == "__main__":
    main()
