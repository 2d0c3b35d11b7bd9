"""SAC, TD3 and DDPG on Pendulum-v1 to -200 within 20k env steps: rlmesh's tuned examples
(``rlmesh train -f pendulum-{sac,td3,ddpg}.yaml``) beside stable-baselines3's SAC and TD3 with
rl-baselines3-zoo's hyperparameters (``peer_sb3_offpolicy.py`` in the peers' venv), seed by
seed in the same run. Both stop at the first check where the mean return of the last 10
episodes is >= -200. DDPG has no SB3 run here; its figures stand beside SB3's TD3.

``sac_acting``: a runner's env steps/s on Pendulum-v1 acting with SAC's numpy policy vs
its torch policy (``--acting`` when run as a module).

``python -m tests.benchmarks.run --only sac_td3`` (``--quick``: one seed). Set
``PEERS_PYTHON`` to use a peers' venv other than this checkout's ``.venv-peers``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from . import children
from .bench_ppo import NOT_INSTALLED, PEERS_PYTHON, PPORow, _results, _train_cmd
from .bench_runtime import ROOT, Row
from .ppo_sides import started

PEER = ROOT / "tests" / "benchmarks" / "peer_sb3_offpolicy.py"
TUNED = ROOT / "rlmesh" / "tuned_examples"
SOLVED, WINDOW, BUDGET = -200.0, 10, 20_000
GOAL = 0.5  # rlmesh's wall time at most half of stable-baselines3's
# rlmesh's algorithm -> the SB3 run it stands beside.
PAIRS = {"sac": "sac", "td3": "td3", "ddpg": "td3"}


@dataclass(frozen=True)
class Sizes:
    seeds: tuple[int, ...]
    algos: tuple[str, ...]


DEFAULT = Sizes(seeds=(0, 1, 2), algos=("sac", "td3", "ddpg"))
QUICK = Sizes(seeds=(0,), algos=("sac", "td3", "ddpg"))


def _peers_python() -> Path:
    return Path(os.environ.get("PEERS_PYTHON", PEERS_PYTHON))


def rlmesh_learns(algo: str, seed: int, tmp: Path) -> dict[str, Any]:
    local_dir = tmp / f"{algo}-{seed}"
    t0 = time.perf_counter()
    with started(_train_cmd("-f", str(TUNED / f"pendulum-{algo}.yaml"), "--local-dir",
                            str(local_dir), "--seed", str(seed)),
                 stdout=subprocess.DEVNULL) as (proc, _):
        code = proc.wait()
    wall = time.perf_counter() - t0
    results = _results(local_dir)
    if code != 0 or not results:
        raise RuntimeError(f"rlmesh train -f pendulum-{algo}.yaml --seed {seed} exited {code}")
    last = results[-1]
    return {"wall": wall, "timesteps": last["timesteps_total"], "inside": last["time_total_s"],
            "solved": last["episode_reward_mean"] >= SOLVED}


def sb3_learns(algo: str, seed: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    # One torch thread, as rlmesh's learner: torch's default of one per core slowed SB3
    # several times over on the loaded 2-core VM (seed 1 below), a figure of the machine.
    with started([str(_peers_python()), str(PEER), "--algo", algo, "--seed", str(seed),
                  "--threshold", str(SOLVED), "--window", str(WINDOW), "--threads", "1"],
                 stdout=subprocess.PIPE, text=True) as (proc, _):
        out, _ = proc.communicate()
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"peer_sb3_offpolicy.py --algo {algo} --seed {seed} exited "
                           f"{proc.returncode}")
    got = json.loads(out.strip().splitlines()[-1])
    return {"wall": wall, "timesteps": got["timesteps"], "inside": got["learn_s"],
            "solved": got["solved"], "version": got["stable_baselines3"]}


def rows_of(algo: str, runs: list[tuple[int, dict, dict]], peer: str) -> list[Row]:
    """Per seed: wall time (the goal), env steps and time inside the loop; then medians."""
    rows: list[Row] = []
    name = f"{algo.upper()} Pendulum-v1 to {SOLVED:g}"
    for seed, ours, theirs in runs:
        failed = ", ".join(f"{who} did not reach {SOLVED:g} in {BUDGET:,} steps"
                           for who, r in (("rlmesh", ours), ("sb3", theirs)) if not r["solved"])
        rows += [PPORow(f"{name}, seed {seed}", "s, process start to exit", ours["wall"],
                        theirs["wall"], peer, goal=GOAL, failed=failed),
                 PPORow(f"{name}, seed {seed}", "env steps", ours["timesteps"],
                        theirs["timesteps"], peer),
                 PPORow(f"{name}, seed {seed}", "s in the training loop", ours["inside"],
                        theirs["inside"], peer)]
    if len(runs) > 1:
        med = lambda side, key: statistics.median(r[side][key] for r in runs)  # noqa: E731
        unsolved = any(not (r[1]["solved"] and r[2]["solved"]) for r in runs)
        rows.append(PPORow(f"{name}, median of {len(runs)} seeds", "s, process start to exit",
                           med(1, "wall"), med(2, "wall"), peer, goal=GOAL,
                           failed="some run did not solve" if unsolved else ""))
    return rows


def bench_learning(sizes: Sizes, tmp: Path) -> list[Row]:
    have_peer = _peers_python().exists()
    nan = float("nan")
    none = {"wall": nan, "timesteps": nan, "inside": nan, "solved": True, "version": "?"}
    sb3: dict[tuple[str, int], dict[str, Any]] = {}
    rows: list[Row] = []
    for algo in sizes.algos:
        runs = []
        for seed in sizes.seeds:  # take turns, seed by seed
            ours = rlmesh_learns(algo, seed, tmp)
            key = (PAIRS[algo], seed)
            if key not in sb3:
                sb3[key] = sb3_learns(*key) if have_peer else none
            theirs = sb3[key]
            runs.append((seed, ours, theirs))
            print(f"  {algo} seed {seed}: rlmesh {ours['wall']:.1f} s {ours['timesteps']} steps "
                  f"solved={ours['solved']}, sb3 {PAIRS[algo]} {theirs['wall']:.1f} s "
                  f"{theirs['timesteps']} steps solved={theirs['solved']}", flush=True)
        version = runs[0][2]["version"]
        peer = (f"stable-baselines3 {version} {PAIRS[algo].upper()}, rl-zoo's Pendulum "
                "hyperparameters" if have_peer else NOT_INSTALLED)
        rows += rows_of(algo, runs, peer)
    return rows


# --- runner-side acting: SAC's numpy policy against its torch policy, same weights ---

ACTING_ROUNDS, ACTING_SECONDS = 5, 2.0


def _acting_samplers(num_envs: int, env_id: str = "Pendulum-v1",
                     hiddens: tuple[int, ...] = (64, 64)) -> dict[str, Any]:
    """The runner's EnvSampler on ``env_id`` twice: acting with SACTorchPolicy (one torch
    thread, as runners set it) and with the NumpySACPolicy runners now get, on the same
    (trained-looking: perturbed) weights, past random_timesteps, with the tuned example's
    networks ([64, 64] on Pendulum, [256, 256] on MuJoCo)."""
    import gymnasium as gym
    import torch

    from rlmesh.algorithms.sac import SACConfig, SACTorchPolicy
    from rlmesh.policy.numpy_actor import NumpySACPolicy
    from rlmesh.roles.env_sampler import EnvSampler

    torch.set_num_threads(1)
    net = {"fcnet_hiddens": list(hiddens)}
    config = SACConfig().environment(env_id).training(q_model_config=net,
                                                      policy_model_config=net)
    env = gym.make(env_id)
    torch_policy = SACTorchPolicy(env.observation_space, env.action_space, config)
    numpy_policy = NumpySACPolicy(env.observation_space, env.action_space, config)
    numpy_policy.set_weights(torch_policy.get_weights())
    seeds = list(range(num_envs))
    return {side: EnvSampler(lambda i: gym.make(env_id), num_envs, policy, seeds=seeds)
            for side, policy in (("torch", torch_policy), ("numpy", numpy_policy))}


def _sampling_rate(sampler: Any, fragment: int, seconds: float) -> float:
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        steps += sampler.sample(fragment)["env_steps"]
    return steps / (time.perf_counter() - start)


def acting_rates(rounds: int, env_id: str = "Pendulum-v1") -> list[dict[str, Any]]:
    """Median env steps/s of each side, per runner shape, and the load meanwhile."""
    out = []
    hiddens = (64, 64) if env_id == "Pendulum-v1" else (256, 256)
    for num_envs, fragment in ((1, 4), (8, 4)):  # the tuned example's runner; 8 envs
        samplers = _acting_samplers(num_envs, env_id, hiddens)
        rates: dict[str, list[float]] = {side: [] for side in samplers}
        load0 = os.getloadavg()[0]
        for _ in range(rounds):
            for side, sampler in samplers.items():
                rates[side].append(_sampling_rate(sampler, fragment, ACTING_SECONDS))
        for sampler in samplers.values():
            for slot in sampler.slots:
                slot.env.close()
        out.append({"env": env_id, "envs": num_envs, "fragment": fragment,
                    "load": (load0 + os.getloadavg()[0]) / 2,
                    **{side: statistics.median(r) for side, r in rates.items()}})
    return out


def bench_acting(sizes: Sizes, tmp: Path) -> list[Row]:
    """Env steps/s of SAC's runner sampling Pendulum-v1, acting in numpy vs torch: the two
    samplers in one process of their own (torch stays out of run.py's), rounds interleaved
    so load drifts hit both, medians."""
    rounds = 2 if sizes is QUICK else ACTING_ROUNDS
    proc = children.run([sys.executable, "-m", "tests.benchmarks.bench_sac_td3",
                           "--acting-rates", str(rounds)], cwd=ROOT, check=True,
                          capture_output=True, text=True)
    rows: list[Row] = []
    for r in json.loads(proc.stdout.strip().splitlines()[-1]):
        print(f"  SAC acting, {r['envs']} env(s): numpy {r['numpy']:,.0f}, torch "
              f"{r['torch']:,.0f} env steps/s ({r['numpy'] / r['torch']:.2f}x), "
              f"load {r['load']:.1f}", flush=True)
        rows.append(PPORow(f"SAC runner sampling Pendulum-v1, {r['envs']} env(s), fragments "
                           f"of {r['fragment']} (EnvSampler alone, 1 process; load "
                           f"{r['load']:.1f})", "env steps/s", r["numpy"], r["torch"],
                           "the same sampler acting with SACTorchPolicy (1 torch thread)",
                           higher_is_better=True))
    return rows


BENCHMARKS: dict[str, Callable[[Sizes, Path], list[Row]]] = {"sac_td3_learning": bench_learning,
                                                            "sac_acting": bench_acting}


if __name__ == "__main__":
    import tempfile

    from .run import text_table

    if "--acting-rates" in sys.argv:  # bench_acting's own process
        env_id = sys.argv[sys.argv.index("--env") + 1] if "--env" in sys.argv else "Pendulum-v1"
        print(json.dumps(acting_rates(int(sys.argv[sys.argv.index("--acting-rates") + 1]),
                                      env_id)))
        sys.exit(0)
    quick = "--quick" in sys.argv
    bench = bench_acting if "--acting" in sys.argv else bench_learning
    with tempfile.TemporaryDirectory() as tmp:
        print(text_table(bench(QUICK if quick else DEFAULT, Path(tmp))))
