"""APEX end to end: env steps/s sampled, transitions/s inserted into the replay shards,
learner updates/s and samples/s, at 2 and 4 runners (2 shards), each beside synchronous DQN
with the same runners, network, batch and training_intensity, measured in the same run.

Two settings: ``training_intensity`` 8 (both train 8 samples per env step: the figures say
how much the pipeline overlaps sampling with learning), and APEX unthrottled
(``training_intensity`` None: the runners sample as fast as they can, as in RLlib's APEX; its
reference is the same DQN). Each side runs in a process of its own, one after the other.
``apex_local_shard``: APEX with one replay shard in the driver (the learner samples it without
a socket) against one shard process, same runners and settings, in the same run.
``apex_learning``: the tuned examples to their goals (cartpole-apex.yaml: 450, 3 runners,
2 shards; pendulum-apex-ddpg.yaml: -200), env steps and seconds, each runner's mean return,
and a greedy evaluation of the final policy (20 episodes, ``compute_single_action``).
``python -m tests.benchmarks.run --only apex``; ``python -m tests.benchmarks.bench_apex side
APEX 2 8`` runs one side alone and prints its figures as JSON; ``python -m
tests.benchmarks.bench_apex learn cartpole-apex.yaml 0`` one learning run; ``side APEX 2 8 20
1 process`` one side with one shard in a process of its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .bench_runtime import Row
from .ppo_sides import started

BATCH = 64
LEARNING_STARTS = 1000


@dataclass(frozen=True)
class ApexSizes:
    runners: tuple[int, ...]
    seconds: float  # measured, after the warm-up


DEFAULT = ApexSizes(runners=(2, 4), seconds=20.0)
QUICK = ApexSizes(runners=(2,), seconds=8.0)


def config(run: str, runners: int, intensity: float | None, shards: int = 2) -> Any:
    from rlmesh.algorithms.apex_config import ApexDQNConfig
    from rlmesh.algorithms.dqn_config import DQNConfig

    cls = ApexDQNConfig if run == "APEX" else DQNConfig
    training = {"train_batch_size": BATCH, "lr": 1e-3, "n_step": 3, "hiddens": [],
                "training_intensity": intensity, "target_network_update_freq": 1000,
                "num_steps_sampled_before_learning_starts": LEARNING_STARTS,
                "replay_buffer_config": {"type": "MultiAgentPrioritizedReplayBuffer",
                                         "capacity": 100_000},
                "model": {"fcnet_hiddens": [64, 64]}}
    if run == "APEX":
        training["num_replay_buffer_shards"] = shards
    return (cls().environment("CartPole-v1")
            .env_runners(num_env_runners=runners, rollout_fragment_length=50)
            .training(**training)
            .reporting(min_sample_timesteps_per_iteration=1000)
            .debugging(seed=0))


def side(run: str, runners: int, intensity: float | None, seconds: float, shards: int = 2,
         shard_process: bool = False) -> dict[str, float]:
    """One side in this process: warm up past learning_starts, then count for ``seconds``
    (``shard_process``: one shard in a process of its own, not in the driver)."""
    from rlmesh.driver.async_mesh import ApexMesh

    ApexMesh.local_single_shard = not shard_process
    with config(run, runners, intensity, shards).build() as algo:
        first = algo.train()
        while first["timesteps_total"] < 2 * LEARNING_STARTS:
            first = algo.train()
        t0 = time.perf_counter()
        last = first
        while time.perf_counter() - t0 < seconds:
            last = algo.train()
        elapsed = time.perf_counter() - t0
    delta = lambda key: (last[key] - first[key]) / elapsed  # noqa: E731
    return {"env_steps_per_s": delta("timesteps_total"),
            "inserted_per_s": delta("replay_buffer_num_added"),
            "samples_per_s": delta("num_env_steps_trained"),
            "updates_per_s": delta("num_env_steps_trained") / BATCH}


def _measure(run: str, runners: int, intensity: float | None, seconds: float,
             *where: str) -> dict[str, float]:
    cmd = [sys.executable, "-m", "tests.benchmarks.bench_apex", "side", run, str(runners),
           str(intensity), str(seconds), *where]
    with started(cmd, stdout=subprocess.PIPE, text=True) as (proc, _):
        out = proc.communicate()[0]
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[2:])} exited with {proc.returncode}")
    return json.loads(out.strip().splitlines()[-1])


METRICS = (("env_steps_per_s", "env steps/s sampled"),
           ("inserted_per_s", "transitions/s inserted"),
           ("updates_per_s", "learner updates/s (batch 64)"),
           ("samples_per_s", "learner samples/s"))


def bench_throughput(sizes: ApexSizes, tmp: Path) -> list[Row]:
    rows: list[Row] = []
    for n in sizes.runners:
        dqn = _measure("DQN", n, 8.0, sizes.seconds)
        peer = f"synchronous DQN, {n} runners, same settings, training_intensity 8"
        for intensity in (8.0, None):
            apex = _measure("APEX", n, intensity, sizes.seconds)
            what = "training_intensity 8" if intensity else "unthrottled"
            print(f"  {n} runners, {what}: APEX {apex}, DQN {dqn}", flush=True)
            name = f"APEX CartPole-v1, {n} runners, 2 shards, {what}"
            rows += [Row(name, label, apex[key], dqn[key], peer, higher_is_better=True)
                     for key, label in METRICS]
    return rows


def bench_local_shard(sizes: ApexSizes, tmp: Path) -> list[Row]:
    """One shard in the driver against one shard process; both sides alternate twice so
    the machine's other load falls on both alike."""
    rows: list[Row] = []
    for n in sizes.runners[:1]:
        for intensity in (8.0, None):
            runs: dict[str, list[dict[str, float]]] = {"driver": [], "process": []}
            for _ in range(2):
                runs["driver"].append(_measure("APEX", n, intensity, sizes.seconds, "1", "driver"))
                runs["process"].append(_measure("APEX", n, intensity, sizes.seconds, "1",
                                                "process"))
            mean = {k: {m: sum(r[m] for r in v) / len(v) for m, _ in METRICS}
                    for k, v in runs.items()}
            what = "training_intensity 8" if intensity else "unthrottled"
            print(f"  {n} runners, {what}: {runs}", flush=True)
            name = f"APEX CartPole-v1, {n} runners, 1 shard in the driver, {what}"
            peer = "1 shard in a process of its own, same settings"
            rows += [Row(name, label, mean["driver"][key], mean["process"][key], peer,
                         higher_is_better=True) for key, label in METRICS]
    return rows


# --- learning: the tuned examples to their goals ---

def learn(name: str, seed: int) -> dict[str, Any]:
    """One tuned example to its stop criteria, in this process; the figures as a dict."""
    import gymnasium as gym
    import numpy as np

    from rlmesh import tuned_examples
    from rlmesh.cli.train import config_class

    _, exp, _ = tuned_examples.load_experiment(name)
    cfg = config_class(exp["run"]).from_dict({**exp["config"], "env": exp["env"], "seed": seed})
    # The stop: a greedy evaluation's mean (cartpole-apex.yaml) or the runners' (the rest).
    stop_key = next(k for k in exp["stop"] if k.endswith("episode_reward_mean"))
    stop_on = "evaluation" if stop_key.startswith("evaluation/") else "all runners"
    goal, budget = exp["stop"][stop_key], exp["stop"]["timesteps_total"]
    t0 = time.perf_counter()
    reached: dict[str, Any] = {}
    with cfg.build() as algo:
        while True:
            r = algo.train()
            best_runner = max(r["episode_reward_mean_by_runner"].values(), default=-np.inf)
            evaluation = r.get("evaluation", {}).get("episode_reward_mean", -np.inf)
            for what, value in (("all runners", r["episode_reward_mean"]),
                                ("best runner", best_runner), ("evaluation", evaluation)):
                if value >= goal and what not in reached:
                    reached[what] = {"timesteps": r["timesteps_total"],
                                     "s": time.perf_counter() - t0}
            if stop_on in reached or r["timesteps_total"] >= budget:
                break
        env = gym.make(exp["env"])
        returns = []
        for episode in range(20):  # the final policy, greedy
            obs, _ = env.reset(seed=10_000 + episode)
            total, done = 0.0, False
            while not done:
                obs, rew, term, trunc, _ = env.step(algo.compute_single_action(obs))
                total += float(rew)
                done = term or trunc
            returns.append(total)
    return {"name": name, "seed": seed, "goal": goal, "reached": reached,
            "timesteps": r["timesteps_total"], "s": time.perf_counter() - t0,
            "final_mean_all_runners": r["episode_reward_mean"],
            "final_by_runner": r["episode_reward_mean_by_runner"],
            "greedy_eval_mean": float(np.mean(returns)),
            "learner_updates": r["num_learner_updates_total"]}


def bench_learning(sizes: ApexSizes, tmp: Path) -> list[Row]:
    rows: list[Row] = []
    nan = float("nan")
    for name in ("cartpole-apex.yaml", "pendulum-apex-ddpg.yaml"):
        cmd = [sys.executable, "-m", "tests.benchmarks.bench_apex", "learn", name, "0"]
        with started(cmd, stdout=subprocess.PIPE, text=True) as (proc, _):
            got = json.loads(proc.communicate()[0].strip().splitlines()[-1])
        print(f"  {name}: {got}", flush=True)
        for what in ("evaluation", "all runners", "best runner"):
            hit = got["reached"].get(what, {})
            rows.append(Row(f"{name} to {got['goal']:g} ({what} mean), seed 0",
                            "env steps", hit.get("timesteps", nan), got["timesteps"],
                            "the run's env step budget"))
        rows.append(Row(f"{name}, final policy", "greedy return, 20 episodes",
                        got["greedy_eval_mean"], got["goal"], "the goal",
                        higher_is_better=True))
    return rows


BENCHMARKS: dict[str, Callable[[ApexSizes, Path], list[Row]]] = {
    "apex_throughput": bench_throughput,
    "apex_local_shard": bench_local_shard,
    "apex_learning": bench_learning,
}


if __name__ == "__main__":
    if sys.argv[1:2] == ["side"]:
        run, runners, intensity, seconds = sys.argv[2:6]
        shards, where = (sys.argv[6:8] + ["2", "process"][len(sys.argv[6:8]):])
        got = side(run, int(runners), None if intensity == "None" else float(intensity),
                   float(seconds), int(shards), where == "process")
        print(json.dumps(got), flush=True)
    elif sys.argv[1:2] == ["learn"]:
        print(json.dumps(learn(sys.argv[2], int(sys.argv[3]))), flush=True)
