"""Sampling rate of multi-agent CartPole (2 and 8 independent CartPoles per env) against
single-agent CartPole, measured in the same run with the same runner policy (the default
model's numpy copy) and the same number of envs: the env runner's sampling loop itself
(``EnvSampler`` / ``MultiAgentSampler``), no sockets. The goal: an agent step costs about
what a single-agent step does (>= 0.8x the single-agent env steps/s, per agent step).

``python -m tests.benchmarks.bench_multi_agent [--envs 8] [--seconds 3] [--rounds 5]``
(the three interleaved round after round, the median round of each reported; about
1 minute). Measured, never asserted.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import gymnasium as gym

from rlmesh.algorithms.ppo import PPOConfig
from rlmesh.env import make_multi_agent
from rlmesh.roles.env_runner import default_policy_specs
from rlmesh.roles.env_sampler import EnvSampler
from rlmesh.roles.multi_agent_sampler import MultiAgentSampler
from rlmesh.roles.runner_policy import make_runner_policies

FRAGMENT = 64  # rows per sample() call, as a runner's rollout_fragment_length
MultiAgentCartPole = make_multi_agent("CartPole-v1")


def _policy(config: Any) -> Any:
    env = gym.make("CartPole-v1")
    specs = default_policy_specs(env.observation_space, env.action_space, config)
    return make_runner_policies(specs, config, 0, own_process=True)["default_policy"]


def _rate(sampler: Any, seconds: float) -> tuple[float, float]:
    """(env steps/s, agent steps/s) of ``sampler.sample(FRAGMENT)`` over ``seconds``."""
    sampler.sample(FRAGMENT)  # warm up: first resets, column layouts
    env_steps = agent_steps = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        out = sampler.sample(FRAGMENT)
        env_steps += out["env_steps"]
        agent_steps += out.get("agent_steps", out["env_steps"])
    elapsed = time.perf_counter() - start
    return env_steps / elapsed, agent_steps / elapsed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--envs", type=int, default=8)
    p.add_argument("--seconds", type=float, default=3.0, help="per measurement")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    policy = _policy(PPOConfig())
    n = args.envs
    samplers = {1: EnvSampler(lambda i: gym.make("CartPole-v1"), n, policy, seeds=list(range(n)))}
    for agents in (2, 8):
        samplers[agents] = MultiAgentSampler(
            lambda i, k=agents: MultiAgentCartPole({"num_agents": k}), n,
            {"default_policy": policy}, lambda agent_id, episode: "default_policy",
            seeds=list(range(n)))
    # Rounds interleave the three, so a change in the machine's load hits all alike; the
    # median round of each is reported.
    rates: dict[int, list[tuple[float, float]]] = {k: [] for k in samplers}
    for _ in range(args.rounds):
        for agents, sampler in samplers.items():
            rates[agents].append(_rate(sampler, args.seconds))
    med = {k: sorted(v, key=lambda r: r[1])[len(v) // 2] for k, v in rates.items()}
    base = med[1][1]
    print("| sampler | envs | env steps/s | agent steps/s | per agent step vs single |")
    print("|---|---:|---:|---:|---:|")
    for agents, (env_rate, agent_rate) in med.items():
        name = "single-agent CartPole" if agents == 1 else f"multi-agent CartPole, {agents} agents"
        goal = "" if agents == 1 else " (goal >= 0.8x)"
        print(f"| {name} | {n} | {env_rate:,.0f} | {agent_rate:,.0f} | "
              f"{agent_rate / base:.2f}x{goal} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
