"""RLlib's tuned examples, run unchanged: each CartPole and Pendulum conformance file
(tests/conformance/files) trained by `rlmesh train -f FILE` to its own stop within its own
budget (the file's timesteps_total or time_total_s stop), and, with RLlib's venv
(.venv-rllib, `make .venv-rllib/.installed`), RLlib running the same file beside it
(tests/benchmarks/peer_rllib_file.py). One row per file and side: reached, env steps,
seconds. Measured, never asserted.

``python -m tests.benchmarks.bench_conformance [--only SUBSTR[,SUBSTR]] [--seeds 0 1 2]
[--no-rllib] [--offline-data DIR]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.benchmarks.children import run
from tests.conformance.files import all_files

ROOT = Path(__file__).resolve().parents[2]
RLLIB_PYTHON = ROOT / ".venv-rllib" / "bin" / "python"
REWARD_KEYS = ("episode_reward_mean", "sampler_results/episode_reward_mean",
               "env_runners/episode_return_mean", "evaluation/episode_reward_mean",
               "evaluation/env_runners/episode_return_mean")
BUDGET_KEYS = ("timesteps_total", "num_env_steps_sampled_lifetime", "time_total_s",
               "training_iteration")
WALL_CAP_S = 900  # a file that learns at all does so well within this on 2 cores


def experiment(path: Path) -> dict:
    from rlmesh.tuned_examples import load_experiments

    experiments, _ = load_experiments(str(path))
    return experiments[0][1]


def goal(exp: dict) -> tuple[str | None, float | None]:
    stop = exp.get("stop") or {}
    for key in REWARD_KEYS:
        if key in stop:
            return key, float(stop[key])
    return None, None


def is_offline(path: Path) -> bool:
    return (experiment(path).get("config") or {}).get("input", "sampler") != "sampler"


def write_offline_data(target: Path) -> Path:
    """CartPole episodes for the BC and MARWIL files, made as their RLlib files say: a PPO run
    of 50k env steps writing complete episodes (RLlib's JSON lines)."""
    cmd = [sys.executable, "-m", "rlmesh.cli.main", "train", "--run", "PPO", "--env",
           "CartPole-v1", "--seed", "0", "--local-dir", str(target / "runs"),
           "--stop", json.dumps({"timesteps_total": 50_000}),
           "--config", json.dumps({"output": str(target / "data"),
                                   "batch_mode": "complete_episodes"})]
    run(cmd, timeout=WALL_CAP_S, capture_output=True, check=True)
    return target / "data"


def rlmesh_side(path: Path, seed: int, workdir: Path, data: Path | None) -> dict:
    """`rlmesh train -f path --seed S` to the file's stop; the last result's figures."""
    local = workdir / f"rlmesh-{path.stem}-{seed}"
    cmd = [sys.executable, "-m", "rlmesh.cli.main", "train", "-f", str(path),
           "--seed", str(seed), "--local-dir", str(local)]
    config = experiment(path).get("config") or {}
    if data is not None and config.get("input") == "dataset":
        cmd += ["--config", json.dumps({"input_config": {"paths": str(data)}})]
    elif data is not None and is_offline(path):
        cmd += ["--config", json.dumps({"input": str(data)})]
    start = time.perf_counter()
    try:
        proc = run(cmd, timeout=WALL_CAP_S, capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        proc = subprocess.CompletedProcess(cmd, -9, "", f"stopped after {WALL_CAP_S} s")
    wall = time.perf_counter() - start
    results = sorted(local.glob("*/*/result.json"))
    if not results:
        return {"error": (proc.stderr.strip().splitlines() or ["no result"])[-1], "wall_s": wall}
    last = json.loads(results[-1].read_text().splitlines()[-1])
    return {"result": last, "wall_s": wall, "exit": proc.returncode}


def rllib_side(path: Path, seed: int) -> dict:
    cmd = [str(RLLIB_PYTHON), str(ROOT / "tests" / "benchmarks" / "peer_rllib_file.py"),
           str(path), "--seed", str(seed)]
    start = time.perf_counter()
    try:
        proc = run(cmd, timeout=WALL_CAP_S, capture_output=True, text=True)
        stdout, stderr = proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as e:  # the last iteration it printed still counts
        stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        stderr = f"stopped after {WALL_CAP_S} s"
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if not lines:
        tail = (stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": tail[:160], "wall_s": time.perf_counter() - start}
    return json.loads(lines[-1])


def row(path: Path, side: str, seed: int, out: dict) -> dict:
    from rlmesh.results import flatten, lookup

    exp = experiment(path)
    key, threshold = goal(exp)
    budget = None
    if "error" in out:
        return {"file": path.name, "side": side, "seed": seed, "reached": "error",
                "steps": None, "seconds": round(out.get("wall_s", 0)), "note": out["error"]}
    result = out["result"]
    if key is None:  # an offline file stops on its budget; its score is the evaluation's
        key = "evaluation/episode_reward_mean"
        budget = (exp.get("stop") or {}).get("timesteps_total")
    reward = lookup(flatten(result), key)
    reached = (reward is not None and threshold is not None and reward >= threshold) or (
        threshold is None and budget is not None and result.get("timesteps_total", 0) >= budget)
    return {"file": path.name, "side": side, "seed": seed, "reached": "yes" if reached else "no",
            "reward": None if reward is None else round(float(reward), 1), "goal": threshold,
            "steps": result.get("timesteps_total"), "seconds": round(result.get("time_total_s", 0)),
            "budget": {k: v for k, v in (exp.get("stop") or {}).items() if k in BUDGET_KEYS}}


def table(rows: list[dict]) -> str:
    lines = ["| file | side | seed | reached | reward / goal | env steps | seconds | budget |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        reward = f"{r.get('reward')} / {r.get('goal')}" if r["reached"] != "error" else r["note"]
        lines.append(f"| {r['file']} | {r['side']} | {r['seed']} | {r['reached']} | {reward} | "
                     f"{r['steps']} | {r['seconds']} | {json.dumps(r.get('budget', {}))} |")
    return "\n".join(lines)


def main() -> None:
    global WALL_CAP_S
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", help="comma-separated substrings of file names")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--no-rllib", action="store_true")
    p.add_argument("--rllib-only", action="store_true", help="RLlib's side alone")
    p.add_argument("--wall-cap", type=int, default=WALL_CAP_S,
                   help=f"seconds one run may take before it is cut (default {WALL_CAP_S})")
    p.add_argument("--offline-data", type=Path,
                   help="a JSON-lines dataset for the BC/MARWIL files (default: written first "
                        "by a PPO run, tests/benchmarks/bench_offline's recipe)")
    p.add_argument("--json", type=Path, help="also write the rows here")
    args = p.parse_args()
    WALL_CAP_S = args.wall_cap
    files = [f for f in all_files() if any(e in f.stem for e in ("cartpole", "pendulum"))]
    if args.only:
        files = [f for f in files if any(s in f.name for s in args.only.split(","))]
    with_rllib = not args.no_rllib and RLLIB_PYTHON.exists()
    workdir = Path(tempfile.mkdtemp(prefix="rlmesh-conformance-"))
    rows = []
    data = args.offline_data
    if data is None and not args.rllib_only and any(is_offline(f) for f in files):
        data = write_offline_data(workdir / "offline")
    try:
        for path in files:
            for seed in args.seeds:
                if not args.rllib_only:
                    rows.append(row(path, "rlmesh", seed,
                                    rlmesh_side(path, seed, workdir, data)))
                    print(json.dumps(rows[-1]), flush=True)
                if with_rllib:
                    rows.append(row(path, "RLlib", seed, rllib_side(path, seed)))
                    print(json.dumps(rows[-1]), flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    if not with_rllib and not args.no_rllib:
        print("(RLlib's side not run: no .venv-rllib; make .venv-rllib/.installed)",
              file=sys.stderr)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
