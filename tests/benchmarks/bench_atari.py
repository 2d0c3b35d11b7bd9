"""PPO on Pong end to end, rlmesh against its limits and its peers on this machine, in one
run (issue 34). Not in CI; needs ale-py (``rlmesh[envs]``) and, for the peers, ``make
bench-peers``.

``python -m tests.benchmarks.bench_atari [--steps 20000] [--peers cleanrl,sample_factory,rllib]
[--only raw,learner,rlmesh]``. Every side does the same learner work per sample
(atari_setup.ATARI_PPO: Nature CNN, batches of 1,024, 2 epochs of minibatches of 256). Rows:

- the two limits: the raw ale-py vector env (8 envs, random actions, no policy) and the
  learner alone (rlmesh's PPO update on a real batch of frames, samples/s);
- rlmesh end to end while learning, env steps/s after its first iteration, for several
  layouts: gymnasium's per-env stepping (the path before issue 34), the C++ vector env with
  runner inference (1 or 2 runners, double buffered, sampling ahead of the update or not),
  central inference;
- each peer's env steps/s while learning (peer_*_atari.py, in venvs of their own).

Then the ratios the issue asks for: rlmesh's best against the best peer, and against the
smaller of the two limits (which one binds is named).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from tests.benchmarks.atari_setup import ATARI_PPO as P

MODEL = {"conv_filters": [[c, [k, k], s] for c, k, s in P["conv_filters"]],
         "fcnet_hiddens": [P["dense"]], "fcnet_activation": "relu", "vf_share_layers": True}

#: rlmesh's layouts: (name, env_config atari, runners, envs each, inference, sample_async)
LAYOUTS = [
    ("gym per-env, 2x4", True, 2, 4, "runner", False),
    ("vector, 2x4, runner inference", {"vector": True}, 2, 4, "runner", False),
    ("vector, 1x8, runner inference", {"vector": True}, 1, 8, "runner", False),
    ("vector, 1x8, runner inference, sample_async", {"vector": True}, 1, 8, "runner", True),
    ("vector, 2x4, central inference", {"vector": True}, 2, 4, "central", False),
]


def ppo_config(atari: Any, runners: int, envs: int, inference: str, sample_async: bool):
    from rlmesh.algorithms.ppo import PPOConfig

    env_config = {"atari": atari, "repeat_action_probability": P["repeat_action_probability"]}
    return (PPOConfig()
            .environment(P["env_id"], env_config=env_config, clip_rewards=P["reward_clip"])
            .env_runners(num_env_runners=runners, num_envs_per_env_runner=envs,
                         rollout_fragment_length=P["train_batch_size"] // (runners * envs),
                         inference_mode=inference, sample_async=sample_async)
            .training(train_batch_size=P["train_batch_size"], minibatch_size=P["minibatch_size"],
                      num_epochs=P["num_epochs"], lr=P["lr"], gamma=P["gamma"],
                      lambda_=P["lambda"], clip_param=P["clip_param"],
                      vf_loss_coeff=P["vf_loss_coeff"], entropy_coeff=P["entropy_coeff"],
                      grad_clip=P["grad_clip"], model=MODEL)
            .learners(num_cpus_per_learner=P["torch_threads"])
            .debugging(seed=0))


def raw_vector_env(seconds: float) -> float:
    """The emulator's own speed: ale-py's vector env of 8 games, random actions."""
    from ale_py.vector_env import AtariVectorEnv

    env = AtariVectorEnv(P["game"], P["num_envs"], repeat_action_probability=0.0,
                         autoreset_mode="SameStep")
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    start, steps = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        env.step(rng.integers(0, 6, P["num_envs"]))
        steps += P["num_envs"]
    env.close()
    return steps / (time.perf_counter() - start)


def learner_alone(seconds: float) -> float:
    """rlmesh's PPO update (GAE, 2 epochs of 4 minibatches) on a real batch of 1,024 frames
    stacks, samples/s, with the learner's thread count."""
    import asyncio

    import torch

    from rlmesh.algorithms.ppo import PPOTorchPolicy
    from rlmesh.env.vector import vector_env_factory
    from rlmesh.preprocessing import atari_settings
    from rlmesh.rl.columns import merge_fragments
    from rlmesh.roles.vector_sampler import VectorEnvSampler

    torch.set_num_threads(P["torch_threads"])
    cfg = ppo_config({"vector": True}, 1, P["num_envs"], "runner", False)
    _, settings = atari_settings({"atari": {"vector": True}}, P["env_id"])
    sampler = VectorEnvSampler(vector_env_factory(P["env_id"], {}, settings), P["num_envs"],
                               seed=0)
    policy = PPOTorchPolicy(sampler.observation_space, sampler.action_space, cfg)
    sampler.policy = policy
    batch = merge_fragments([asyncio.run(sampler.sample(P["rollout_fragment_length"]))])
    sampler.close()
    learner = PPOTorchPolicy(sampler.observation_space, sampler.action_space, cfg).for_learning()
    learner.update(batch, 0)
    start, n = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        learner.update(batch, 0)
        n += P["train_batch_size"]
    return n / (time.perf_counter() - start)


def rlmesh_end_to_end(layout: tuple, steps: int) -> dict[str, Any]:
    name, atari, runners, envs, inference, sample_async = layout
    with ppo_config(atari, runners, envs, inference, sample_async).build() as algo:
        result = algo.train()  # warm-up: processes, torch, the first weights
        t0, start = time.perf_counter(), result["timesteps_total"]
        while result["timesteps_total"] - start < steps:
            result = algo.train()
        done = result["timesteps_total"] - start
        wall = time.perf_counter() - t0
        timers = result["timers"]
        return {"side": f"rlmesh: {name}", "env_steps_per_s": done / wall, "env_steps": done,
                "wall_s": wall, "inference": result["info"]["inference"]["mode"],
                "sample_s_last": timers["sample_time_s"], "learn_s_last": timers["learn_time_s"]}


def measure(steps: int, seconds: float, only: set[str], layouts: list[tuple],
            peers: list[str]) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """The limits ({name: env steps/s}) and the end-to-end rows, printed as they come."""
    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f} at start")
    limits: dict[str, float] = {}
    rows: list[dict[str, Any]] = []
    if "raw" in only:
        limits["raw vector env (8 envs)"] = raw_vector_env(seconds)
    if "learner" in only:
        limits["learner alone"] = learner_alone(seconds)
    for name, rate in limits.items():
        print(f"limit  {name:50s} {rate:9.0f} env steps/s", flush=True)
    if "rlmesh" in only:
        for layout in layouts:
            rows.append(rlmesh_end_to_end(layout, steps))
            print(json.dumps(rows[-1]), flush=True)
    if "peers" in only:
        from tests.benchmarks.atari_peers import run_peer

        for peer in peers:
            out = run_peer(peer, steps, timeout=1800)
            rows.append({"side": f"peer: {peer}", **out})
            print(json.dumps(rows[-1]), flush=True)
    print(f"load {os.getloadavg()[0]:.2f} at the end")
    return limits, rows


def best(rows: list[dict[str, Any]], prefix: str) -> dict[str, Any] | None:
    found = [r for r in rows if r["side"].startswith(prefix) and r.get("env_steps_per_s")]
    return max(found, key=lambda r: r["env_steps_per_s"]) if found else None


@dataclass(frozen=True)
class AtariSizes:
    steps: int  # env steps timed per side
    seconds: float  # per limit
    layouts: tuple[int, ...]  # indices of LAYOUTS
    peers: tuple[str, ...]


DEFAULT = AtariSizes(20_000, 15.0, tuple(range(len(LAYOUTS))), ("cleanrl", "sample_factory", "rllib"))
QUICK = AtariSizes(4_000, 5.0, (0, 3), ("cleanrl",))


def bench_atari_throughput(sizes: AtariSizes, tmp: Any) -> list:
    """``make bench`` rows: rlmesh's best layout against the smaller limit (goal 0.8x) and
    the best peer (goal 2x), and against each limit."""
    from tests.benchmarks.bench_runtime import Row

    limits, rows = measure(sizes.steps, sizes.seconds, {"raw", "learner", "rlmesh", "peers"},
                           [LAYOUTS[i] for i in sizes.layouts], list(sizes.peers))
    ours = best(rows, "rlmesh")
    if ours is None:
        return []
    rate, bench = ours["env_steps_per_s"], f"atari PPO Pong ({ours['side'][8:]})"
    metric = "env steps/s while learning"
    binding = min(limits, key=limits.get)
    out = [Row(bench, metric, rate, limits[binding], f"the smaller limit: {binding}", 0.8, True)]
    out += [Row(bench, metric, rate, v, k, None, True) for k, v in limits.items() if k != binding]
    peer = best(rows, "peer")
    if peer is not None:
        out.append(Row(bench, metric, rate, peer["env_steps_per_s"],
                       f"best peer, {peer['side'][6:]}", 2.0, True))
    return out


BENCHMARKS = {"atari_throughput": bench_atari_throughput}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=DEFAULT.steps, help="env steps timed per side")
    parser.add_argument("--seconds", type=float, default=DEFAULT.seconds, help="per limit measured")
    parser.add_argument("--peers", default=",".join(DEFAULT.peers))
    parser.add_argument("--only", default="raw,learner,rlmesh,peers")
    parser.add_argument("--layouts", default="", help="indices of LAYOUTS (default: all)")
    args = parser.parse_args()
    layouts = [LAYOUTS[int(i)] for i in args.layouts.split(",")] if args.layouts else LAYOUTS
    limits, rows = measure(args.steps, args.seconds, set(args.only.split(",")), layouts,
                           [p for p in args.peers.split(",") if p])
    print("\n| side | env steps/s while learning |\n| --- | --- |")
    for name, rate in limits.items():
        print(f"| limit: {name} | {rate:.0f} |")
    for row in rows:
        rate = row.get("env_steps_per_s")
        print(f"| {row['side']} | {rate:.0f} |" if rate else f"| {row['side']} | {row.get('error')} |")
    ours, peer = best(rows, "rlmesh"), best(rows, "peer")
    if ours:
        print(f"\nrlmesh's best: {ours['side']}, {ours['env_steps_per_s']:.0f} env steps/s")
        if peer:
            print(f"against the best peer ({peer['side']}): "
                  f"{ours['env_steps_per_s'] / peer['env_steps_per_s']:.2f}x (goal 2x)")
        if limits:
            binding = min(limits, key=limits.get)
            print(f"against the smaller limit ({binding}, {limits[binding]:.0f}): "
                  f"{ours['env_steps_per_s'] / limits[binding]:.2f}x (goal 0.8x)")


if __name__ == "__main__":
    main()
