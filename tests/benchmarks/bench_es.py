"""ES evaluation throughput: perturbed episodes evaluated per second by 1, 2 and 4 runner
processes (``ESMesh.rollouts``, what an ES iteration waits for) against the same loop
(``Evaluator.rollouts``: same env, policy, noise table) in this one process, measured in the
same run; the scaling efficiency ``rate(n) / (n * rate(in-process))``; and the bytes a
runner's reply takes on the wire, per episode.

``python -m tests.benchmarks.bench_es [--env Pendulum-v1] [--episodes 200] [--runners 1 2 4]``
Pendulum-v1 by default: every episode is 200 steps, so episodes per second do not drift with
what the policy learned. The weights stay fixed (no update), as the rate is the runners'.
Measured, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import numpy as np

from rlmesh.algorithms.es import CHUNKS, ESConfig
from rlmesh.envs import make_env
from rlmesh.rl.filters import make_filter
from rlmesh.rl.noise_table import NoiseTable
from rlmesh.roles.es_runner import Evaluator
from rlmesh.wire import codec

NOISE_SIZE = 2_000_000


def config(env: str, runners: int, episodes: int) -> ESConfig:
    return (ESConfig().environment(env).env_runners(num_env_runners=runners)
            .training(episodes_per_batch=episodes, train_batch_size=1, eval_prob=0.0,
                      noise_size=NOISE_SIZE, model={"fcnet_hiddens": [64, 64]})
            .debugging(seed=0))


def in_process(env: str, episodes: int) -> tuple[float, float]:
    """Episodes per second of the runner's loop in this process, and bytes per episode of
    its reply as the wire encodes it."""
    cfg = config(env, 0, episodes)
    from rlmesh.policy.es_policy import ESPolicy

    e = make_env(env)
    policy = ESPolicy(e.observation_space, e.action_space, cfg)
    evaluator = Evaluator(e, policy, NoiseTable.shared(NOISE_SIZE),
                          make_filter(cfg.observation_filter, e.observation_space), cfg, 0)
    theta = policy.get_flat()
    asyncio.run(evaluator.rollouts(theta, 2, 0))  # warm up
    start = time.perf_counter()
    reply = asyncio.run(evaluator.rollouts(theta, episodes // 2, 0))
    rate = episodes / (time.perf_counter() - start)
    # One call's reply as ESMesh asks for it (a 1/CHUNKS share), with the stamps it carries.
    share = asyncio.run(evaluator.rollouts(theta, max(1, episodes // 2 // CHUNKS), 0))
    share.update(policy_version=1, worker_index=1)
    size = sum(len(memoryview(f).cast("B")) for f in codec.encode(share))
    return rate, size / (2 * len(share["noise_indices"]))


def distributed(env: str, runners: int, episodes: int, repeats: int = 2) -> float:
    """Episodes per second over ``runners`` runner processes: the best of ``repeats``
    batches of ``episodes`` (the first batch, made while processes warm up, not counted)."""
    algo = config(env, runners, episodes).build()
    try:
        rates = []
        for i in range(repeats + 1):
            start = time.perf_counter()
            got = algo._loop.run(algo.mesh.rollouts(episodes // 2, 0, CHUNKS))
            seconds = time.perf_counter() - start
            n = 2 * sum(len(r["noise_indices"]) for r in got)
            if i:
                rates.append(n / seconds)
        return max(rates)
    finally:
        algo.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="Pendulum-v1")
    p.add_argument("--episodes", type=int, default=200)
    p.add_argument("--runners", type=int, nargs="+", default=[1, 2, 4])
    args = p.parse_args()
    base, per_episode = in_process(args.env, args.episodes)
    print(f"ES evaluation, {args.env}, [64, 64] tanh MLP, {args.episodes} episodes per batch")
    print("| runners | episodes/s | scaling efficiency |")
    print("| --- | --- | --- |")
    print(f"| in-process loop | {base:.0f} | 1.00 |")
    for n in args.runners:
        rate = distributed(args.env, n, args.episodes)
        print(f"| {n} | {rate:.0f} | {rate / (n * base):.2f} |", flush=True)
    print(f"bytes per episode on the wire (one call's reply, {CHUNKS} calls per runner per "
          f"iteration, framing included): {per_episode:.1f}")
    print(f"CPU cores: {len(__import__('os').sched_getaffinity(0))}")


if __name__ == "__main__":
    main()
