"""Learner samples/s on a GPU: PPO's and IMPALA's updates of a conv net on 84x84x4 uint8 frames
(Atari after DeepMind preprocessing), rlmesh's learner against bare torch doing the same update
on the same net and device, in float32 and under bf16 autocast, and the same updates on the CPU.
"The same update" includes PPO's diagnostics pass (one no-grad forward over the batch after the
epochs, which rlmesh's PPO makes for its adaptive KL coefficient and its statistics).

``python -m tests.benchmarks.bench_gpu_learner [--rounds 7] [--cpu-threads N]``

Both sides start from the batch in host memory (numpy, as it arrives off the wire) and end with
the update's statistics read back, so the host-to-device copy and the sync are in both. The net
is rlmesh's default conv model for these spaces (``build_model``), the same module class on both
sides; bare torch writes the loss, minibatching, clipping and optimizer step by hand (V-trace is
rlmesh's ``rl/vtrace.py`` on both sides: it is math, not plumbing). Median wall time over
interleaved rounds. Goal: rlmesh >= 0.9x bare torch. Without CUDA it runs on the CPU (smaller
batches) and says so.
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

from rlmesh.algorithms.impala import ImpalaConfig, ImpalaTorchPolicy
from rlmesh.algorithms.ppo import PPOConfig, PPOTorchPolicy
from rlmesh.rl.default_model import build_model
from rlmesh.rl.vtrace import vtrace

OBS = gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)
ACT = gym.spaces.Discrete(6)
# (samples, minibatch, epochs) for PPO; (T, B) for IMPALA: on a GPU as in the figure,
# on the CPU small enough for a 2-core machine.
SIZES = {"cuda": {"ppo": (4096, 512, 2), "impala": (50, 32)},
         "cpu": {"ppo": (512, 128, 1), "impala": (20, 8)}}
LR, CLIP, VF_COEFF, ENT_COEFF, GRAD_CLIP, GAMMA = 3e-4, 0.2, 0.5, 0.01, 0.5, 0.99


def ppo_samples(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"obs": rng.integers(0, 256, (n, *OBS.shape), dtype=np.uint8),
            "actions": rng.integers(0, ACT.n, n), "action_logp": np.full(n, -1.79, np.float32),
            "action_dist_inputs": np.zeros((n, ACT.n), np.float32),
            "advantages": rng.normal(size=n).astype(np.float32),
            "value_targets": rng.normal(size=n).astype(np.float32)}


def impala_batch(t: int, b: int, seed: int = 0) -> dict[str, np.ndarray]:
    """A time-major batch as the learner receives it (fixed-length fragments, no truncation)."""
    rng = np.random.default_rng(seed)
    return {"obs": rng.integers(0, 256, (t, b, *OBS.shape), dtype=np.uint8),
            "actions": rng.integers(0, ACT.n, (t, b)),
            "action_logp": np.full((t, b), -1.79, np.float32),
            "action_dist_inputs": np.zeros((t, b, ACT.n), np.float32),
            "rewards": rng.normal(size=(t, b)).astype(np.float32),
            "terminateds": rng.random((t, b)) < 0.01, "truncateds": np.zeros((t, b), bool),
            "mask": np.ones((t, b), bool),
            "next_obs": rng.integers(0, 256, (b, *OBS.shape), dtype=np.uint8),
            "trunc_index": np.zeros((0, 2), np.int64),
            "trunc_obs": np.zeros((0, *OBS.shape), np.uint8)}


def autocast(device: torch.device, bf16: bool):
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16)


# --- PPO ---

def rlmesh_ppo(device: torch.device, bf16: bool, n: int, minibatch: int, epochs: int
               ) -> Callable[[dict], None]:
    cfg = PPOConfig.from_dict({"lr": LR, "clip_param": CLIP, "vf_loss_coeff": VF_COEFF,
                               "entropy_coeff": ENT_COEFF, "grad_clip": GRAD_CLIP,
                               "use_kl_loss": False, "vf_clip_param": None,
                               "minibatch_size": minibatch, "num_epochs": epochs, "seed": 0,
                               "_torch_autocast": "bf16" if bf16 else None})
    policy = PPOTorchPolicy(OBS, ACT, cfg, device=device).for_learning()
    return lambda batch: policy.learn_on_batch(batch)


def bare_ppo(device: torch.device, bf16: bool, n: int, minibatch: int, epochs: int
             ) -> Callable[[dict], None]:
    model = build_model(OBS, ACT, PPOConfig().model).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=LR)

    def update(batch: dict) -> None:
        data = {k: torch.from_numpy(v).to(device, non_blocking=True) for k, v in batch.items()}
        losses = []
        for _ in range(epochs):
            for idx in torch.randperm(n, device=device).split(minibatch):
                mb = {k: v[idx] for k, v in data.items()}
                with autocast(device, bf16):
                    logits, values = model(mb["obs"])
                    logp_all = torch.log_softmax(logits.float(), -1)
                    logp = logp_all.gather(-1, mb["actions"][:, None]).squeeze(-1)
                    ratio = torch.exp(logp - mb["action_logp"])
                    adv = mb["advantages"]
                    surrogate = torch.min(adv * ratio, adv * ratio.clamp(1 - CLIP, 1 + CLIP))
                    entropy = -(logp_all.exp() * logp_all).sum(-1).mean()
                    vf_loss = (values.float() - mb["value_targets"]).pow(2).mean()
                    loss = -surrogate.mean() + VF_COEFF * vf_loss - ENT_COEFF * entropy
                opt.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
                opt.step()
                losses.append(loss.detach())
        # PPO's diagnostics as rlmesh's update computes them: one pass over the batch after
        # the epochs (entropy, KL from the behaviour policy, clip fraction, explained variance)
        with torch.no_grad(), autocast(device, bf16):
            parts = [model(data["obs"][i:i + minibatch]) for i in range(0, n, minibatch)]
            logits = torch.cat([p[0] for p in parts]).float()
            values = torch.cat([p[1] for p in parts]).float()
            logp_all = torch.log_softmax(logits, -1)
            behaviour = torch.log_softmax(data["action_dist_inputs"], -1)
            ratio = torch.exp(logp_all.gather(-1, data["actions"][:, None]).squeeze(-1)
                              - data["action_logp"])
            targets = data["value_targets"]
            stats = [-(logp_all.exp() * logp_all).sum(-1).mean(),
                     (behaviour.exp() * (behaviour - logp_all)).sum(-1).mean(),
                     ((ratio - 1).abs() > CLIP).float().mean(),
                     1 - (targets - values).var() / targets.var(), torch.stack(losses).mean()]
        torch.stack(stats).tolist()  # the statistics read back, as the learner's are

    return update


# --- IMPALA ---

def rlmesh_impala(device: torch.device, bf16: bool, t: int, b: int) -> Callable[[dict], None]:
    cfg = ImpalaConfig.from_dict({"lr": LR, "vf_loss_coeff": VF_COEFF, "entropy_coeff": ENT_COEFF,
                                  "grad_clip": GRAD_CLIP, "gamma": GAMMA, "seed": 0,
                                  "_torch_autocast": "bf16" if bf16 else None})
    policy = ImpalaTorchPolicy(OBS, ACT, cfg, device=device).for_learning()
    return lambda batch: policy.update(batch, 0)


def bare_impala(device: torch.device, bf16: bool, t: int, b: int) -> Callable[[dict], None]:
    model = build_model(OBS, ACT, ImpalaConfig().model).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=LR)

    def update(batch: dict) -> None:
        d = {k: torch.from_numpy(v).to(device, non_blocking=True) for k, v in batch.items()}
        with autocast(device, bf16):
            logits, all_values = model(torch.cat([d["obs"].flatten(0, 1), d["next_obs"]]))
            logits, all_values = logits[:t * b].float(), all_values.float()
            values = all_values[:t * b].reshape(t, b)
            bootstrap = torch.zeros_like(values)
            bootstrap[t - 1] = all_values[t * b:]
            logp_all = torch.log_softmax(logits, -1)
            logp = logp_all.gather(-1, d["actions"].reshape(-1, 1)).reshape(t, b)
            with torch.no_grad():
                vs, pg_adv = vtrace(d["action_logp"], logp.detach(), d["rewards"], values.detach(),
                                    bootstrap, d["terminateds"], d["truncateds"], GAMMA)
            entropy = -(logp_all.exp() * logp_all).sum(-1).mean()
            loss = (-(logp * pg_adv).mean() + VF_COEFF * 0.5 * (values - vs).pow(2).mean()
                    - ENT_COEFF * entropy)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        opt.step()
        loss.item()

    return update


def samples_per_s(fns: dict[str, Callable[[dict], None]], batch: dict, steps: int, rounds: int,
                  device: torch.device) -> dict[str, float]:
    """Sample-steps per second (samples x epochs / wall), median over interleaved rounds."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():
        fn(batch)  # warm up: cuDNN's algorithm search, allocator, first kernels
    for _ in range(rounds):
        for name, fn in fns.items():
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            fn(batch)
            if device.type == "cuda":
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - start)
    return {k: steps / statistics.median(v) for k, v in times.items()}


def measure(device: torch.device, rounds: int, bf16: bool) -> list[tuple[str, float, float]]:
    """``(update, rlmesh samples/s, bare torch samples/s)`` on ``device``."""
    sizes = SIZES[device.type]
    n, minibatch, epochs = sizes["ppo"]
    t, b = sizes["impala"]
    rows = []
    for precision in (["fp32", "bf16"] if bf16 else ["fp32"]):
        on = precision == "bf16"
        ppo = samples_per_s({"rlmesh": rlmesh_ppo(device, on, n, minibatch, epochs),
                             "bare": bare_ppo(device, on, n, minibatch, epochs)},
                            ppo_samples(n), n * epochs, rounds, device)
        rows.append((f"PPO conv, {n} x {epochs} epochs / {minibatch}, {precision}",
                     ppo["rlmesh"], ppo["bare"]))
        impala = samples_per_s({"rlmesh": rlmesh_impala(device, on, t, b),
                                "bare": bare_impala(device, on, t, b)},
                               impala_batch(t, b), t * b, rounds, device)
        rows.append((f"IMPALA conv, {t} x {b} whole batch, {precision}",
                     impala["rlmesh"], impala["bare"]))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--cpu-threads", type=int, default=0,
                        help="torch threads for the CPU rows (default: torch's own)")
    parser.add_argument("--no-cpu", action="store_true", help="skip the CPU rows on a GPU machine")
    args = parser.parse_args()
    if args.cpu_threads:
        torch.set_num_threads(args.cpu_threads)
    cuda = torch.cuda.is_available()
    if cuda:
        torch.backends.cudnn.benchmark = True
        print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    else:
        print(f"no CUDA here: the updates run on the CPU ({torch.get_num_threads()} threads, "
              f"smaller batches), torch {torch.__version__}")
    results = []
    if cuda:
        bf16 = torch.cuda.is_bf16_supported()
        results += [("cuda", *r) for r in measure(torch.device("cuda"), args.rounds, bf16)]
    if not cuda or not args.no_cpu:
        results += [("cpu", *r) for r in measure(torch.device("cpu"), max(3, args.rounds // 2),
                                                 False)]
    print("\n| device | update | rlmesh samples/s | bare torch samples/s | ratio |")
    print("| --- | --- | --- | --- | --- |")
    for device, name, mine, bare in results:
        print(f"| {device} | {name} | {mine:,.0f} | {bare:,.0f} | {mine / bare:.2f}x |")
    gpu = {name.split(",")[0] + name.rsplit(",", 1)[1]: mine for d, name, mine, _ in results
           if d == "cuda"}
    for d, name, mine, _ in results:
        key = name.split(",")[0] + name.rsplit(",", 1)[1]
        if d == "cpu" and key in gpu:
            print(f"{name.split(',')[0]}: GPU {gpu[key] / mine:.1f}x the CPU (rlmesh, fp32; "
                  "the CPU rows use smaller batches)")


if __name__ == "__main__":
    main()
