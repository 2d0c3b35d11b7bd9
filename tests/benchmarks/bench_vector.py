"""Vector envs at the simulator's speed (issue 52): CartPole-v1 through gymnasium's numpy
``CartPoleVectorEnv`` at 64, 1,024 and 4,096 envs per runner.

Each size, in turns so that every side sees the same load on this 2-core machine:

- **raw**: one process stepping ``gym.make_vec("CartPole-v1", n, "vector_entry_point")``
  with random actions: the simulator's own speed, the reference of every ratio;
- **sampler alone**: rlmesh's ``VectorEnvSampler`` and the runners' numpy policy ([64, 64],
  tanh) in this process, fragments built, no sockets;
- **end to end**: PPO's env runners (processes of their own) sampling, fragments delivered
  to the learner in the driver (``mesh.runners.sample``, as ``train()`` calls it), learning
  off;
- **training**: PPO's ``train()`` with the same runners: env steps per second of training;
- **one-env path**: the end-to-end figure with ``env_config vector False`` (one gym.Env
  per slot, EnvSampler), at 64 envs, the size where that path is meant to run.

``python -m tests.benchmarks.bench_vector [--quick] [--sizes 64,1024,4096] [--runners 2]``
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import statistics
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one core per process, as runners have

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

from .bench_runtime import Row  # noqa: E402

ENV = "CartPole-v1"
MODEL = {"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh", "vf_share_layers": False}


def fragment_length(n: int) -> int:
    """Rows per fragment: about 32k env steps a fragment, at least 16 rows."""
    return max(16, 32768 // n)


def raw_rate(n: int, seconds: float) -> float:
    env = gym.make_vec(ENV, num_envs=n, vectorization_mode="vector_entry_point")
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(20):
            env.step(rng.integers(0, 2, n))
        steps += 20 * n
    rate = steps / (time.perf_counter() - start)
    env.close()
    return rate


def ppo_config(n: int, runners: int, vector: Any = "auto", **training: Any) -> Any:
    from rlmesh.algorithms.ppo_config import PPOConfig

    length = fragment_length(n)
    settings = {"train_batch_size": runners * n * length, "minibatch_size": 8192,
                "num_epochs": 1, "model": MODEL, **training}
    return (PPOConfig().environment(ENV, env_config={"vector": vector})
            .env_runners(num_env_runners=runners, num_envs_per_env_runner=n,
                         rollout_fragment_length=length)
            .training(**settings).debugging(seed=0))


def sampler_rate(n: int, seconds: float) -> float:
    from rlmesh.env.gym_vector import gym_vector_maker
    from rlmesh.policy.numpy_mlp import NumpyMLPPolicy
    from rlmesh.roles.vector_sampler import VectorEnvSampler

    cfg = ppo_config(n, 1)
    sampler = VectorEnvSampler(gym_vector_maker(cfg, {}), n, seed=0)
    sampler.policy = NumpyMLPPolicy(sampler.observation_space, sampler.action_space, cfg)
    sampler.episodes_listed = cfg.metrics_num_episodes_for_smoothing
    length = fragment_length(n)

    async def run() -> float:
        await sampler.sample(length)
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            steps += (await sampler.sample(length))["env_steps"]
        return steps / (time.perf_counter() - start)

    try:
        return asyncio.run(run())
    finally:
        sampler.close()


class Mesh:
    """A PPO algorithm kept up between turns: its runners' sampling, and its training."""

    def __init__(self, n: int, runners: int, vector: Any = "auto") -> None:
        self.n, self.runners = n, runners
        self.batch = runners * n * fragment_length(n)
        self.algo = ppo_config(n, runners, vector).build()
        for _ in range(2):  # warm: subscriptions, first weights, allocations
            self.algo.mesh.runners.sample(self.batch)

    def sampling_rate(self, seconds: float) -> float:
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            steps += sum(f["env_steps"] for f in self.algo.mesh.runners.sample(self.batch))
        return steps / (time.perf_counter() - start)

    def training_rate(self, iterations: int) -> float:
        steps = secs = 0.0
        for _ in range(iterations):
            result = self.algo.train()
            steps += result["num_env_steps_sampled_this_iter"]
            secs += result["time_this_iter_s"]
        return steps / secs

    def stop(self) -> None:
        self.algo.stop()


def measure(sizes: list[int], runners: int, rounds: int, seconds: float,
            iterations: int) -> list[dict[str, Any]]:
    rows = []
    for n in sizes:
        got: dict[str, list[float]] = {k: [] for k in ("raw", "sampler", "e2e", "train", "one")}
        mesh = Mesh(n, runners)
        one = Mesh(n, runners, vector=False) if n <= 64 else None
        try:
            for _ in range(rounds):
                got["raw"].append(raw_rate(n, seconds))
                got["sampler"].append(sampler_rate(n, seconds))
                got["e2e"].append(mesh.sampling_rate(seconds))
                got["train"].append(mesh.training_rate(iterations))
                if one is not None:
                    got["one"].append(one.sampling_rate(seconds))
                print(f"  {n} envs: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in got.items()
                                                  if v), flush=True)
        finally:
            mesh.stop()
            if one is not None:
                one.stop()
        rows.append({"envs": n, **{k: (statistics.median(v) if v else float("nan"),
                                       min(v, default=float("nan")),
                                       max(v, default=float("nan")))
                                   for k, v in got.items()}})
    return rows


def table(rows: list[dict[str, Any]], runners: int) -> str:
    def cell(v: tuple[float, float, float]) -> str:
        med, lo, hi = v
        return "-" if med != med else f"{med:,.0f} ({lo:,.0f}-{hi:,.0f})"

    out = [f"| envs per runner | raw vector env, 1 process | sampler alone, 1 process | "
           f"end to end, {runners} runners | ratio to raw | training, {runners} runners | "
           f"one-env path, end to end |",
           "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        ratio = r["e2e"][0] / r["raw"][0]
        out.append(f"| {r['envs']:,} | {cell(r['raw'])} | {cell(r['sampler'])} | "
                   f"{cell(r['e2e'])} | {ratio:.2f}x | {cell(r['train'])} | {cell(r['one'])} |")
    return "\n".join(out)


@dataclasses.dataclass(frozen=True)
class VectorSizes:
    sizes: tuple[int, ...] = (64, 1024, 4096)
    runners: int = 2
    rounds: int = 3
    seconds: float = 2.0
    iterations: int = 5


DEFAULT = VectorSizes()
QUICK = VectorSizes(sizes=(1024,), rounds=1, seconds=1.0, iterations=3)
RAW = "1 process: gymnasium's CartPoleVectorEnv, random actions"


def bench_sampling(sizes: VectorSizes, tmp: Path) -> list[Row]:
    """``make bench``'s rows: each size's end-to-end sampling (goal: 0.25x the raw env),
    the sampler alone and training, each over the raw vector env of the same size."""
    rows: list[Row] = []
    for r in measure(list(sizes.sizes), sizes.runners, sizes.rounds, sizes.seconds,
                     sizes.iterations):
        name = f"CartPole vector env, {sizes.runners} runners x {r['envs']} envs"
        raw = r["raw"][0]
        rows += [Row(name, "env steps/s end to end (fragments at the learner)", r["e2e"][0],
                     raw, RAW, goal=0.25, higher_is_better=True),
                 Row(name, "env steps/s, the runner's sampler alone (1 process)",
                     r["sampler"][0], raw, RAW, higher_is_better=True),
                 Row(name, "env steps/s while PPO trains", r["train"][0], raw, RAW,
                     higher_is_better=True)]
        if r["one"][0] == r["one"][0]:
            rows.append(Row(name, "env steps/s end to end, one-env path (vector False)",
                            r["one"][0], raw, RAW, higher_is_better=True))
    return rows


BENCHMARKS = {"vector_sampling": bench_sampling}


PUFFER_PYTHON = Path(".venv-puffer/bin/python")
#: PufferLib's published figures (quoted, not measured here: its trainer, PufferLib 3.0's
#: ``pufferl``, does not build offline; 2.0.2's wheel ships no trainer).
PUFFER_QUOTED = ("PufferLib (quoted, puffer.ai blog, the 2.0 post): its C 'Ocean' envs run "
                 ">1M steps/s on one CPU core; training at 300k-1.2M steps/s on one GPU")


def puffer_env_rates(steps: int = 30000) -> dict[str, Any] | None:
    """PufferLib 2.0.2's vectorization of gymnasium's CartPole, random actions (its venv,
    ``make bench-peers``; tests/benchmarks/peer_puffer.py), or None without the venv."""
    import json
    import subprocess
    import sys

    if not PUFFER_PYTHON.exists():
        return None
    out = subprocess.run([str(PUFFER_PYTHON), "tests/benchmarks/peer_puffer.py", "--part", "env",
                          "--env-steps", str(steps)], capture_output=True, text=True, timeout=600,
                         check=False)
    if out.returncode != 0:
        print(f"  PufferLib's peer failed: {out.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def peers_table(seconds: float) -> str:
    """rlmesh at 64 envs (its vector sampler, its one-env path's sampler) beside PufferLib's
    Serial vectorization of the same 64 gymnasium CartPoles."""
    got = puffer_env_rates()
    rows = ["| 64 CartPoles, random actions or rlmesh's policy, 1 process | env steps/s |",
            "| --- | ---: |",
            f"| rlmesh's vector sampler (numpy CartPoleVectorEnv, its [64, 64] policy) | "
            f"{sampler_rate(64, seconds):,.0f} |"]
    if got is None:
        rows.append("| PufferLib 2.0.2 | not installed here (make bench-peers) |")
    for r in (got or {}).get("env", []):
        name = r["backend"] + (f", {r['env']} env, batch {r['batch_size']}" if "env" in r else "")
        rows.append(f"| PufferLib {got['pufferlib']}: {name} | {r['steps_per_s']:,.0f} |")
    rows.append(f"| {PUFFER_QUOTED} | |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one round, 1 s turns")
    parser.add_argument("--sizes", default="64,1024,4096")
    parser.add_argument("--runners", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--peers", action="store_true",
                        help="PufferLib's vectorization beside ours (its venv: make bench-peers)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    rounds, seconds, iterations = (1, 1.0, 3) if args.quick else (args.rounds, 2.0, 5)
    rows = measure(sizes, args.runners, rounds, seconds, iterations)
    print(f"\nCartPole-v1, env steps/s, median (min-max) of {rounds} rounds; training: PPO, "
          f"1 epoch of minibatches of 8192, model [64, 64] tanh\n")
    print(table(rows, args.runners))
    if args.peers:
        print()
        print(peers_table(seconds))


if __name__ == "__main__":
    main()
