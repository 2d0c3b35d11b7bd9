"""PPO benchmarks on one machine: sampling rate, start-up, memory and time to solve CartPole,
each beside a reference measured in the same run.

Every side runs in a process of its own (``ppo_sides``: ``python -m
tests.benchmarks.ppo_sides raw|rlmesh`` serves the sampling sides; ``peer_sb3.py`` and
``peer_rllib.py`` run in the peers' venvs), so the
benchmark process never imports torch or ray: either loaded here would share its pages with
the processes measured and lower their PSS.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .bench_runtime import NEW_SESSION, ROOT, Row
from .ppo_sides import (ENV, NUM_ENVS, NUM_RUNNERS, TUNED, SamplerPeer, _note_descendants,
                        started)

PEERS_PYTHON = ROOT / ".venv-peers" / "bin" / "python"
PEERS_READY = ROOT / ".venv-peers" / ".installed"  # make bench-peers finished
PEER_SB3 = ROOT / "tests" / "benchmarks" / "peer_sb3.py"
NOT_INSTALLED = "reference: not installed (make bench-peers)"
RLLIB_PYTHON = ROOT / ".venv-rllib" / "bin" / "python"
RLLIB_READY = ROOT / ".venv-rllib" / ".installed"  # make bench-peers finished
PEER_RLLIB = ROOT / "tests" / "benchmarks" / "peer_rllib.py"
# Quoted from the issue, used only where .venv-rllib is not installed: RLlib 2.60's PPO on
# CartPole with 2 runners x 8 envs on this machine took 1.5 GB and sampled 4,443 env steps/s.
RLLIB_MEMORY_MB = 1500
RLLIB_SAMPLING = 4443
RLLIB_SAMPLING_GOAL = 5.0  # rlmesh samples at least 5x RLlib's rate, same runner count
RLLIB_MEMORY_GOAL = 1 / 3  # rlmesh's job takes at most a third of RLlib's memory
SOLVED = 475.0
STARTUP_CONFIG = {"num_env_runners": NUM_RUNNERS, "num_envs_per_env_runner": NUM_ENVS,
                  "train_batch_size": 512, "minibatch_size": 256, "num_epochs": 1}


@dataclass(frozen=True)
class PPOSizes:
    """How much work each PPO benchmark does."""

    sampling_steps: int  # env steps per side and round
    sampling_rounds: int  # rounds of taking turns; the median rate is reported
    startup_runs: int  # of each side, after one warm-up each; the median is reported
    memory_samples: int  # samples 0.5 s apart once training runs; the max is reported
    seeds: tuple[int, ...]  # of ppo_learning


DEFAULT = PPOSizes(sampling_steps=60_000, sampling_rounds=5, startup_runs=3, memory_samples=10,
                   seeds=(0, 1, 2))
QUICK = PPOSizes(sampling_steps=16_000, sampling_rounds=2, startup_runs=1, memory_samples=4,
                 seeds=(0,))


@dataclass
class PPORow(Row):
    """A Row whose goal may also be absolute: ``limit`` on rlmesh's own figure."""

    limit: float | None = None  # rlmesh's figure must be at most this (in the metric's unit)
    limit_basis: str = ""  # where the limit comes from
    failed: str = ""  # why the figure does not count (a run that did not solve), if so

    @property
    def verdict(self) -> str:
        if self.failed:
            return f"missed ({self.failed})"
        if self.limit is not None:
            return "met" if self.rlmesh <= self.limit else "missed"
        if self.goal is not None and math.isnan(self.ratio):
            return "no reference"
        return super().verdict

    def goal_text(self) -> str:
        if self.limit is not None:
            basis = f" ({self.limit_basis})" if self.limit_basis else ""
            return f"≤ {self.limit:.3g} {self.metric.split()[0]}{basis}: {self.verdict}"
        if self.goal is None:
            return self.verdict if self.failed else ""
        return f"{'≥' if self.higher_is_better else '≤'} {self.goal:g}x: {self.verdict}"


def _train_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "rlmesh.cli.main", "train", *args]


def _results(local_dir: Path) -> list[dict[str, Any]]:
    """The result lines logged so far under ``local_dir`` (one trial)."""
    found = sorted(local_dir.glob("*/*/result.json"))
    if not found:
        return []
    lines = found[0].read_text().split("\n")[:-1]  # the last piece: "" or a line half written
    return [json.loads(line) for line in lines]


# --- 1. sampling rate: rlmesh's runners vs one process stepping a vector env ---

def _rllib_version() -> str | None:
    """The installed ray's version, read from .venv-rllib without importing it; None when
    ``make bench-peers`` has not installed RLlib's venv."""
    if not RLLIB_READY.exists():
        return None
    found = sorted(RLLIB_PYTHON.parents[1].glob("lib/python*/site-packages/ray-*.dist-info"))
    return found[-1].name.removesuffix(".dist-info").split("-")[1] if found else "?"


def _rllib_quoted(figure: str) -> str:
    return f"RLlib 2.60 PPO, {figure} quoted from the issue, not measured (make bench-peers)"


def bench_sampling(sizes: PPOSizes, tmp: Path) -> list[Row]:
    n, warm = sizes.sampling_steps, max(4000, sizes.sampling_steps // 8)
    rllib_version = _rllib_version()
    rows = []
    raw = SamplerPeer("raw", str(warm))
    try:
        for fragment in ("auto", "32"):
            ours = SamplerPeer("rlmesh", str(warm), fragment)
            # RLlib takes its turns at PPO's default fragments only: its idle daemons would
            # load the other rounds too.
            rllib = (SamplerPeer("sample", str(warm), cmd=[str(RLLIB_PYTHON), str(PEER_RLLIB)])
                     if rllib_version and fragment == "auto" else None)
            rates: dict[str, list[float]] = {"ours": [], "raw": [], "rllib": []}
            try:
                for _ in range(sizes.sampling_rounds):  # take turns: all see the same load
                    for side, peer in (("raw", raw), ("ours", ours), ("rllib", rllib)):
                        if peer is not None:
                            steps, secs = peer.run(n)
                            rates[side].append(steps / secs)
            finally:
                ours.close()
                if rllib is not None:
                    rllib.close()
            length = ours.info[0]
            why = "RLlib PPO's default train batch, 4000" if fragment == "auto" else TUNED
            name = (f"sampling, {NUM_RUNNERS} runners x {NUM_ENVS} envs, fragments of {length} "
                    f"steps per env ({why})")
            ours_rate = statistics.median(rates["ours"])
            rows.append(PPORow(
                name, "env steps/s", ours_rate, statistics.median(rates["raw"]),
                f"1 process: SyncVectorEnv of {NUM_ENVS} + batched torch MLP",
                goal=1.5 if fragment == "auto" else None, higher_is_better=True))
            if fragment != "auto":
                continue
            if rllib is not None:
                peer = (f"RLlib {rllib_version} PPO, same runners, envs and MLP: "
                        f"synchronous_parallel_sample, fragments of {rllib.info[0]} (measured)")
                ref = statistics.median(rates["rllib"])
            else:
                peer, ref = _rllib_quoted(f"{RLLIB_SAMPLING:,} env steps/s"), RLLIB_SAMPLING
            rows.append(PPORow(name, "env steps/s", ours_rate, ref, peer,
                               goal=RLLIB_SAMPLING_GOAL, higher_is_better=True))
    finally:
        raw.close()
    return rows


# --- 2. start-up: `rlmesh train` to its first result line ---

def _first_result_s(local_dir: Path, timeout: float = 120) -> float:
    cmd = _train_cmd("--run", "PPO", "--env", ENV, "--stop", '{"training_iteration": 1}',
                     "--local-dir", str(local_dir), "--config", json.dumps(STARTUP_CONFIG))
    t0 = time.perf_counter()
    with started(cmd, stdout=subprocess.DEVNULL) as (proc, _):
        while not _results(local_dir):
            if proc.poll() is not None:
                raise RuntimeError(f"rlmesh train exited ({proc.returncode}) before a result")
            if time.perf_counter() - t0 > timeout:
                raise RuntimeError(f"no result from rlmesh train in {timeout} s")
            time.sleep(0.01)
        elapsed = time.perf_counter() - t0
        proc.wait(60)  # not timed: the run ends by itself after its one iteration
    return elapsed


def _rllib_first_result_s(timeout: float = 180) -> float:
    """RLlib's peer with the same settings: process start (ray.init included) to the end of
    its first ``algo.train()``; its shutdown after that is not timed."""
    cmd = [str(RLLIB_PYTHON), str(PEER_RLLIB), "startup", "--config", json.dumps(STARTUP_CONFIG)]
    t0 = time.perf_counter()
    with started(cmd, stdout=subprocess.PIPE, text=True) as (proc, seen):
        line = proc.stdout.readline()  # type: ignore[union-attr]
        elapsed = time.perf_counter() - t0
        _note_descendants(proc.pid, seen)
        if line.strip() != "result":
            raise RuntimeError(f"peer_rllib.py startup exited ({proc.wait()}) before a result")
        proc.wait(timeout)
        proc.stdout.close()  # type: ignore[union-attr]
    return elapsed


def _bare_s(code: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, start_new_session=NEW_SESSION)
    return time.perf_counter() - t0


def bench_startup(sizes: PPOSizes, tmp: Path) -> list[Row]:
    bare = "import torch, gymnasium"
    rllib_version = _rllib_version()
    _bare_s(bare)  # warm-up: file caches, first-use costs
    _first_result_s(tmp / "startup-warm")
    if rllib_version:
        _rllib_first_result_s()
    ours, ref, rllib = [], [], []
    for i in range(sizes.startup_runs):  # take turns
        ref.append(_bare_s(bare))
        ours.append(_first_result_s(tmp / f"startup-{i}"))
        if rllib_version:
            rllib.append(_rllib_first_result_s())
    name = "start-up, rlmesh train PPO CartPole (2 runners) to its first result"
    peer = (f"RLlib {rllib_version} PPO, same config: ray.init(), build_algo(), first train() "
            "(measured)" if rllib_version else "RLlib: not installed (make bench-peers)")
    return [PPORow(name, "s", statistics.median(ours), statistics.median(ref),
                   f"python -c '{bare}'", limit=3.0),
            PPORow(name, "s", statistics.median(ours),
                   statistics.median(rllib) if rllib else float("nan"), peer)]


# --- 3. memory: summed PSS of a training job's processes ---

def _tree_memory(pid: int, descendants: set[int]) -> tuple[float, float, int]:
    """(PSS, USS) in MB summed over ``pid`` and all its descendants, and their count."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0, 0.0, 0
    pss = uss = 0
    counted = 0
    for p in procs:
        try:
            mem = p.memory_full_info()
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        descendants.add(p.pid)
        pss, uss, counted = pss + mem.pss, uss + mem.uss, counted + 1
    return pss / 2**20, uss / 2**20, counted


def _sample_memory(proc: subprocess.Popen, descendants: set[int], samples: int,
                   ready: Callable[[], bool], timeout: float = 120) -> tuple[float, float, int]:
    t0 = time.perf_counter()
    while not ready():
        if proc.poll() is not None or time.perf_counter() - t0 > timeout:
            raise RuntimeError(f"{proc.args[:4]} did not get going (exit code {proc.poll()})")
        time.sleep(0.05)
    got = []
    for _ in range(samples):
        got.append(_tree_memory(proc.pid, descendants))
        time.sleep(0.5)
    return max(g[0] for g in got), max(g[1] for g in got), max(g[2] for g in got)


def _rllib_memory(samples: int) -> tuple[float, float, int]:
    """RLlib's peer training PPO (2 runners x 8 envs), sampled like rlmesh's job: the driver
    and every process it started (ray.init's GCS, raylet and agents, the env runners)."""
    with started([str(RLLIB_PYTHON), str(PEER_RLLIB), "train"], stdout=subprocess.PIPE,
                 text=True) as (proc, seen):
        out = proc.stdout
        assert out is not None
        got = _sample_memory(proc, seen, samples, lambda: out.readline().startswith("result"),
                             timeout=240)
        out.close()
    return got


def bench_memory(sizes: PPOSizes, tmp: Path) -> list[Row]:
    local_dir = tmp / "memory"
    cmd = _train_cmd("-f", TUNED, "--local-dir", str(local_dir),
                     "--stop", '{"training_iteration": 1000000}')
    with started(cmd, stdout=subprocess.DEVNULL) as (proc, seen):
        pss, uss, count = _sample_memory(proc, seen, sizes.memory_samples,
                                         lambda: bool(_results(local_dir)))
    code = "import torch, sys, time; print('ready', flush=True); time.sleep(30)"
    with started([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) as (ref, seen):
        ref_pss, ref_uss, _ = _sample_memory(ref, seen, max(3, sizes.memory_samples // 2),
                                             lambda: ref.stdout.readline() != "")
        ref.stdout.close()  # type: ignore[union-attr]
    rllib_version = _rllib_version()
    if rllib_version:
        rl_pss, rl_uss, rl_count = _rllib_memory(sizes.memory_samples)
        basis = f"1/3 of RLlib's {rl_pss / 1000:.2g} GB, measured"
        rl_peer = (f"RLlib {rllib_version} PPO training, 2 runners x 8 envs "
                   f"({rl_count} processes: driver, ray's daemons, runners; measured)")
    else:
        rl_pss, rl_uss = RLLIB_MEMORY_MB, float("nan")
        basis = f"1/3 of RLlib's {RLLIB_MEMORY_MB / 1000:g} GB, quoted"
        rl_peer = _rllib_quoted(f"{RLLIB_MEMORY_MB / 1000:g} GB")
    name = f"memory, rlmesh train -f {TUNED} ({count} processes)"
    peer = "python -c 'import torch' (one process)"
    rows = [
        PPORow(name, "MB PSS, summed", pss, ref_pss, peer, limit=rl_pss * RLLIB_MEMORY_GOAL,
               limit_basis=basis),
        PPORow(name, "MB USS, summed", uss, ref_uss, peer),
        PPORow(name, "MB PSS, summed", pss, rl_pss, rl_peer),
    ]
    if rllib_version:
        rows.append(PPORow(name, "MB USS, summed", uss, rl_uss, rl_peer))
    return rows


# --- 4. learning: CartPole solved, rlmesh's tuned example vs stable-baselines3 ---

def _rlmesh_learns(seed: int, tmp: Path) -> dict[str, Any]:
    local_dir = tmp / f"learn-{seed}"
    t0 = time.perf_counter()
    with started(_train_cmd("-f", TUNED, "--local-dir", str(local_dir), "--seed", str(seed)),
                 stdout=subprocess.DEVNULL) as (proc, _):
        code = proc.wait()
    wall = time.perf_counter() - t0
    results = _results(local_dir)
    if code != 0 or not results:
        raise RuntimeError(f"rlmesh train --seed {seed} exited with {code}")
    last = results[-1]
    return {"wall": wall, "timesteps": last["timesteps_total"], "inside": last["time_total_s"],
            "solved": last["episode_reward_mean"] >= SOLVED}


def _sb3_learns(seed: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    with started([str(PEERS_PYTHON), str(PEER_SB3), "--seed", str(seed)],
                 stdout=subprocess.PIPE, text=True) as (proc, _):
        out, _ = proc.communicate()
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"peer_sb3.py --seed {seed} exited with {proc.returncode}")
    got = json.loads(out.strip().splitlines()[-1])
    return {"wall": wall, "timesteps": got["timesteps"], "inside": got["learn_s"],
            "solved": got["solved"], "version": got["stable_baselines3"]}


def _rllib_learns(seed: int) -> dict[str, Any]:
    """RLlib running rlmesh's tuned example (same hyperparameters, network and stop)."""
    t0 = time.perf_counter()
    with started([str(RLLIB_PYTHON), str(PEER_RLLIB), "learn", "--seed", str(seed)],
                 stdout=subprocess.PIPE, text=True) as (proc, _):
        out, _ = proc.communicate()  # the peer stops ray and its processes itself
    wall = time.perf_counter() - t0
    if proc.returncode != 0 or not out.strip():
        raise RuntimeError(f"peer_rllib.py learn --seed {seed} exited with {proc.returncode}")
    got = json.loads(out.strip().splitlines()[-1])
    return {"wall": wall, "timesteps": got["timesteps"], "inside": got["learn_s"],
            "solved": got["solved"], "version": got["ray"]}


def _learning_rows(runs: list[tuple[int, dict[str, Any], dict[str, Any]]], peer: str,
                   who: str, goal: float | None) -> list[Row]:
    """rlmesh's runs beside one peer's: per seed, then the median of the seeds."""
    rows = []
    for seed, ours, theirs in runs:
        failed = ", ".join(f"{name} did not reach {SOLVED:g}"
                           for name, r in (("rlmesh", ours), (who, theirs)) if not r["solved"])
        name = f"learning, {ENV} to {SOLVED:g}, seed {seed}"
        rows += [
            PPORow(name, "s, process start to exit", ours["wall"], theirs["wall"], peer,
                   goal=goal, failed=failed),
            PPORow(name, "env steps", ours["timesteps"], theirs["timesteps"], peer),
            PPORow(name, "s in the training loop", ours["inside"], theirs["inside"], peer),
        ]
    if len(runs) > 1:
        med = lambda side, key: statistics.median(r[side][key] for r in runs)  # noqa: E731
        rows.append(PPORow(f"learning, {ENV} to {SOLVED:g}, median of {len(runs)} seeds",
                           "s, process start to exit", med(1, "wall"), med(2, "wall"), peer,
                           goal=goal, failed="some run did not solve" if any(
                               not (r[1]["solved"] and r[2]["solved"]) for r in runs) else ""))
    return rows


def bench_learning(sizes: PPOSizes, tmp: Path) -> list[Row]:
    have_peer, have_rllib = PEERS_READY.exists(), RLLIB_READY.exists()
    nan = float("nan")
    none = {"wall": nan, "timesteps": nan, "inside": nan, "solved": True, "version": "?"}
    runs, rllib_runs = [], []
    for seed in sizes.seeds:  # take turns, seed by seed
        ours = _rlmesh_learns(seed, tmp)
        theirs = _sb3_learns(seed) if have_peer else none
        runs.append((seed, ours, theirs))
        note = ""
        if have_rllib:
            rllib = _rllib_learns(seed)
            rllib_runs.append((seed, ours, rllib))
            note = f", rllib {rllib['wall']:.1f} s {rllib['timesteps']} steps"
        print(f"  seed {seed}: rlmesh {ours['wall']:.1f} s {ours['timesteps']} steps, "
              f"sb3 {theirs['wall']:.1f} s {theirs['timesteps']} steps{note}", flush=True)
    version = runs[0][2]["version"]
    peer = (f"stable-baselines3 {version} PPO, rl-zoo's CartPole-v1 hyperparameters"
            if have_peer else NOT_INSTALLED)
    rows = _learning_rows(runs, peer, "sb3", goal=0.5)
    if rllib_runs:
        rllib_peer = (f"RLlib {rllib_runs[0][2]['version']} PPO, {TUNED}'s hyperparameters "
                      "and stop")
        rows += _learning_rows(rllib_runs, rllib_peer, "rllib", goal=None)
    return rows


BENCHMARKS: dict[str, Callable[[PPOSizes, Path], list[Row]]] = {
    "ppo_sampling": bench_sampling,
    "ppo_startup": bench_startup,
    "ppo_memory": bench_memory,
    "ppo_learning": bench_learning,
}


