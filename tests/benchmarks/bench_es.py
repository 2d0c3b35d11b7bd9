"""ES evaluation throughput: perturbed episodes evaluated per second by 1, 2 and 4 runner
processes (``ESMesh.rollouts``, what an ES iteration waits for) against the same loop
(``Evaluator.rollouts``: same env, policy, noise table) in this one process, measured in the
same run; the scaling efficiency ``rate(n) / (n * rate(in-process))``; and the bytes a
runner's reply takes on the wire, per episode.

``python -m tests.benchmarks.bench_es [--env Pendulum-v1] [--episodes 200] [--runners 1 2 4]``
Pendulum-v1 by default: every episode is 200 steps, so episodes per second do not drift with
what the policy learned. The weights stay fixed (no update), as the rate is the runners'.

``python -m tests.benchmarks.bench_es --learning [--examples cartpole-es.yaml ...] [--seeds 0 1]``:
the tuned examples through ``rlmesh train``, one run at a time: env steps, iterations and
seconds to their stop, as a markdown table. Measured, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path


from rlmesh import tuned_examples
from rlmesh.algorithms.es import CHUNKS, ESConfig
from rlmesh.env.registry import make_env
from rlmesh.rl.filters import make_filter
from rlmesh.rl.noise_table import NoiseTable
from rlmesh.roles.es_runner import Evaluator
from rlmesh.wire import codec

from . import children

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
    asyncio.run(evaluator.rollouts(theta, episodes // 2, 0))
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
            got = algo.mesh.runners.rollouts(episodes // 2, 0, CHUNKS)
            seconds = time.perf_counter() - start
            n = 2 * sum(len(r["noise_indices"]) for r in got)
            if i:
                rates.append(n / seconds)
        return max(rates)
    finally:
        algo.stop()


def learning(examples: list[str], seeds: list[int]) -> None:
    """Each tuned example per seed through the CLI; where its last result stood."""
    print("| example | seed | stop met | episode_reward_mean | env steps | iterations | "
          "s training | s start to exit |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for example in examples:
        for seed in seeds:
            with tempfile.TemporaryDirectory() as tmp:
                cmd = [sys.executable, "-m", "rlmesh.cli.main", "train", "-f", example, "--seed",
                       str(seed), "--local-dir", tmp]
                start = time.perf_counter()
                proc = children.run(cmd, capture_output=True, text=True)
                wall = time.perf_counter() - start
                if proc.returncode != 0:
                    print(f"| {example} | {seed} | failed: {proc.stderr[-300:]!r} |")
                    continue
                last = json.loads(next(Path(tmp).glob("*/*/result.json")).read_text()
                                  .splitlines()[-1])
            stop = tuned_examples.load_experiment(example)[1]["stop"]["episode_reward_mean"]
            print(f"| {example} | {seed} | {last['episode_reward_mean'] >= stop} | "
                  f"{last['episode_reward_mean']:.1f} | {last['timesteps_total']:,} | "
                  f"{last['training_iteration']} | {last['time_total_s']:.0f} | {wall:.0f} |",
                  flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="Pendulum-v1")
    p.add_argument("--episodes", type=int, default=200)
    p.add_argument("--runners", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--learning", action="store_true", help="run the tuned examples instead")
    p.add_argument("--examples", nargs="+",
                   default=["cartpole-es.yaml", "cartpole-ars.yaml", "pendulum-es.yaml"])
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = p.parse_args()
    if args.learning:
        return learning(args.examples, args.seeds)
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
