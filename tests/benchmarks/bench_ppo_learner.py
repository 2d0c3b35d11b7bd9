"""PPO's learner alone on big CartPole-shaped batches against bare torch doing the same
update, measured in the same process (issue 52, point 3).

``python -m tests.benchmarks.bench_ppo_learner [--quick] [--threads N] [--rounds R]``

The batch is what a vector env runner ships for CartPole: time-major ``[T, B]`` columns
(obs of 4 floats, Discrete(2) actions, rewards, terminateds, truncateds, mask,
action_logp, action_dist_inputs), ``next_obs`` and a few truncations (``trunc_index``,
``trunc_obs``); episodes end at random steps. rlmesh's side is the Learner the driver runs
(``Learner.update_from_batch``: the batch check, ``PPOTorchPolicy.update`` with GAE,
standardized advantages, shuffled minibatches, the clipped loss, Adam with global-norm
clipping, the statistics). The reference is written here, CleanRL-style: the same two
tanh MLPs, the same GAE over the time-major batch (bootstrapping from ``next_obs`` and the
truncated steps' final observations), the same clipped surrogate, value loss and entropy
bonus, ``torch.optim.Adam`` and ``clip_grad_norm_``, the same epochs and minibatch size,
under the same number of torch threads. ``--reference-tanh rlmesh`` gives the reference
rlmesh's ``Tanh`` (numpy's kernel on CPUs where torch's is several times slower, as on the
AMD EPYC this was written on), so that the ratio is of the rest of the update.

For each setting: the update's env samples per second (``T * B`` / seconds per update) of
each side, as the median of interleaved rounds and their range, and the ratio
rlmesh / bare torch of the medians. Wall-clock time; both sides run in turns, so load from
other work falls on both.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlmesh.algorithms.ppo import PPOConfig
from rlmesh.rl.layers import Tanh, numpy_tanh_pays
from rlmesh.roles.env_runner import default_policy_specs
from rlmesh.roles.learner import Learner

OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
ACT = gym.spaces.Discrete(2)
PPO_POLICY = "rlmesh.algorithms.ppo:PPOTorchPolicy"


def fragment(t: int, b: int, seed: int = 0) -> dict[str, np.ndarray]:
    """A time-major CartPole fragment of ``t`` rows of ``b`` envs, as the vector runner
    builds it (``FragmentBuffer.build``): every row stepped (mask all True), episodes of
    20-200 steps ending by termination, one in ten by truncation."""
    rng = np.random.default_rng(seed)
    done = rng.random((t, b)) < 1 / 60
    truncated = done & (rng.random((t, b)) < 0.1)
    logits = rng.normal(0, 0.1, (t, b, 2)).astype(np.float32)
    actions = rng.integers(0, 2, (t, b))
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    trunc = np.argwhere(truncated[:-1])
    return {
        "obs": rng.normal(0, 1, (t, b, 4)).astype(np.float32),
        "actions": actions.astype(np.int64),
        "rewards": np.ones((t, b), np.float32),
        "terminateds": done & ~truncated, "truncateds": truncated,
        "mask": np.ones((t, b), bool),
        "action_logp": np.take_along_axis(logp, actions[..., None], -1)[..., 0].astype(np.float32),
        "action_dist_inputs": logits,
        "next_obs": rng.normal(0, 1, (b, 4)).astype(np.float32),
        "trunc_index": trunc.astype(np.int64).reshape(-1, 2),
        "trunc_obs": rng.normal(0, 1, (len(trunc), 4)).astype(np.float32),
    }


def config(hiddens: list[int], epochs: int, minibatch: int, train_batch: int,
           threads: int, entropy: float) -> PPOConfig:
    cfg = PPOConfig().training(
        num_epochs=epochs, minibatch_size=minibatch, train_batch_size=train_batch,
        entropy_coeff=entropy, model={"fcnet_hiddens": hiddens, "fcnet_activation": "tanh"})
    cfg = cfg.learners(num_cpus_per_learner=threads)
    cfg.policy_class = PPO_POLICY
    return cfg


def rlmesh_update(cfg: PPOConfig, batch: dict[str, np.ndarray]) -> Callable[[], dict[str, Any]]:
    """One update of the Learner the driver runs with ``num_learners=0``."""
    learner = Learner(cfg, default_policy_specs(OBS, ACT, cfg))
    assert type(learner.policies["default_policy"]).__name__ == "PPOTorchPolicy"
    return lambda: learner.update_from_batch(batch, timesteps=0)["default_policy"]


def mlp(hiddens: list[int], out: int, gain: float, tanh: type[nn.Module]) -> nn.Sequential:
    layers: list[nn.Module] = []
    size = 4
    for h in hiddens:
        layers += [nn.Linear(size, h), tanh()]
        size = h
    head = nn.Linear(size, out)
    nn.init.orthogonal_(head.weight, gain)
    nn.init.zeros_(head.bias)
    return nn.Sequential(*layers, head)


def bare_update(cfg: PPOConfig, batch: dict[str, np.ndarray], tanh: type[nn.Module] = nn.Tanh
                ) -> Callable[[], dict[str, Any]]:
    """The same update written directly in torch (CleanRL's ppo.py, over the time-major
    batch as it arrives)."""
    hiddens = list(cfg.model["fcnet_hiddens"])
    pi, vf = mlp(hiddens, 2, 0.01, tanh), mlp(hiddens, 1, 1.0, tanh)
    params = [*pi.parameters(), *vf.parameters()]
    opt = torch.optim.Adam(params, lr=cfg.lr, foreach=True)
    gamma, lam, clip = cfg.gamma, cfg.gae_lambda(), cfg.clip_param
    vf_coeff, ent_coeff, max_norm = cfg.vf_loss_coeff, cfg.entropy_coeff, cfg.grad_clip
    epochs, minibatch = cfg.num_epochs, cfg.minibatch_size
    data = {k: torch.from_numpy(v) for k, v in batch.items()}

    def update() -> dict[str, Any]:
        obs, rewards = data["obs"], data["rewards"]
        t, b = rewards.shape
        with torch.no_grad():
            values = vf(obs.flatten(0, 1)).reshape(t, b)
            bootstrap = torch.zeros_like(values)
            bootstrap[t - 1] = vf(data["next_obs"]).squeeze(-1)
            index = data["trunc_index"]
            if len(index):
                bootstrap[index[:, 0], index[:, 1]] = vf(data["trunc_obs"]).squeeze(-1)
            term, trunc = data["terminateds"], data["truncateds"]
            not_done = (~(term | trunc)).float()
            advantages = torch.zeros_like(values)
            last = torch.zeros(b)
            for step in reversed(range(t)):
                after = bootstrap[step] if step == t - 1 else values[step + 1]
                after = torch.where(trunc[step], bootstrap[step], after)
                after = torch.where(term[step], 0.0, after)
                delta = rewards[step] + gamma * after - values[step]
                last = delta + gamma * lam * not_done[step] * last
                advantages[step] = last
            returns = advantages + values
        flat_obs, flat_act = obs.flatten(0, 1), data["actions"].flatten()
        flat_logp, flat_ret = data["action_logp"].flatten(), returns.flatten()
        flat_adv = advantages.flatten()
        flat_adv = (flat_adv - flat_adv.mean()) / (flat_adv.std() + 1e-8)
        n = t * b
        losses = []
        for _ in range(epochs):
            for idx in torch.randperm(n).split(minibatch):
                logits = torch.log_softmax(pi(flat_obs[idx]), -1)
                logp = logits.gather(-1, flat_act[idx, None]).squeeze(-1)
                ratio = torch.exp(logp - flat_logp[idx])
                adv = flat_adv[idx]
                pg_loss = -torch.min(adv * ratio, adv * ratio.clamp(1 - clip, 1 + clip)).mean()
                v_loss = (vf(flat_obs[idx]).squeeze(-1) - flat_ret[idx]).pow(2).mean()
                loss = pg_loss + vf_coeff * v_loss
                if ent_coeff:
                    loss = loss - ent_coeff * -(logits.exp() * logits).sum(-1).mean()
                opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(params, max_norm, foreach=True)
                opt.step()
                losses.append(loss.detach())
        return {"total_loss": torch.stack(losses).mean().item(), "num_grad_updates": len(losses)}

    return update


def measure(fns: dict[str, Callable[[], dict[str, Any]]], samples: int, rounds: int
            ) -> dict[str, list[float]]:
    """Env samples per second of each update, one value per round, the sides in turns."""
    rates: dict[str, list[float]] = {k: [] for k in fns}
    steps = {k: fn()["num_grad_updates"] for k, fn in fns.items()}  # warm up, and check
    if len(set(steps.values())) != 1:
        raise AssertionError(f"the sides took different numbers of gradient steps: {steps}")
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            rates[name].append(samples / (time.perf_counter() - start))
    return rates


# (fcnet_hiddens, T, B, num_epochs, minibatch_size, entropy_coeff)
SETTINGS = [
    ([64, 64], 16, 1024, 1, 4096, 0.0),
    ([64, 64], 16, 1024, 4, 4096, 0.0),
    ([64, 64], 8, 4096, 2, 8192, 0.01),
    ([64, 64], 32, 4096, 1, 16384, 0.0),
    ([64, 64], 32, 4096, 4, 16384, 0.0),
    ([256, 256], 16, 1024, 4, 4096, 0.0),
    ([256, 256], 16, 4096, 2, 16384, 0.0),
    ([64, 64], 2, 1024, 10, 128, 0.0),  # PPO's defaults: 2048 samples, 10 epochs of 128
]
QUICK = [SETTINGS[1], SETTINGS[5]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two settings, 3 rounds")
    parser.add_argument("--rounds", type=int, default=None, help="default 7 (3 with --quick)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads of both sides (the learner's num_cpus_per_learner)")
    parser.add_argument("--reference-tanh", choices=("torch", "rlmesh"), default="torch",
                        help="the reference's activation: nn.Tanh (default), or rlmesh's Tanh "
                             "(numpy's kernel where this CPU's torch one is slow, "
                             "rl/layers.py): the rest of the update compared alone")
    args = parser.parse_args()
    rounds = args.rounds or (3 if args.quick else 7)
    tanh = nn.Tanh if args.reference_tanh == "torch" else Tanh
    torch.set_num_threads(args.threads)  # as the Learner sets it: numpy_tanh_pays reads it
    print(f"torch {torch.__version__}, {args.threads} thread(s), {rounds} rounds, reference "
          f"tanh: {args.reference_tanh} (rlmesh's Tanh takes numpy's kernel here: "
          f"{numpy_tanh_pays()}); env samples/s of one update: median [min-max]", flush=True)
    print(f"{'hiddens':>10} {'T x B':>11} {'epochs':>6} {'minibatch':>9} {'rlmesh':>28} "
          f"{'bare torch':>28} {'ratio':>6}")
    for hiddens, t, b, epochs, minibatch, entropy in (QUICK if args.quick else SETTINGS):
        cfg = config(hiddens, epochs, minibatch, t * b, args.threads, entropy)
        batch = fragment(t, b)
        fns = {"rlmesh": rlmesh_update(cfg, batch)}
        torch.set_num_threads(args.threads)  # as the Learner set it
        fns["bare torch"] = bare_update(cfg, batch, tanh)
        rates = measure(fns, t * b, rounds)
        med = {k: statistics.median(v) for k, v in rates.items()}
        cells = [f"{med[k]:>10,.0f} [{min(v):,.0f}-{max(v):,.0f}]" for k, v in rates.items()]
        print(f"{str(hiddens):>10} {f'{t}x{b}':>11} {epochs:>6} {minibatch:>9} "
              f"{cells[0]:>28} {cells[1]:>28} {med['rlmesh'] / med['bare torch']:>6.2f}",
              flush=True)


if __name__ == "__main__":
    main()
