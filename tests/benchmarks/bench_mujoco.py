"""Continuous control on MuJoCo v5 against stable-baselines3 (issue 35): rlmesh's tuned examples
(``rlmesh train -f halfcheetah-sac.yaml`` and the rest) beside SB3 with rl-baselines3-zoo's
hyperparameters (``peer_sb3_mujoco.py`` in the peers' venv), run by run in the same session,
each for the same env steps. Reported per seed: the mean return of the last 10 training
episodes at the end, and the wall time from process start to exit; the goals are rlmesh's
return >= 0.9x SB3's and its wall <= 0.5x SB3's.

``python -m tests.benchmarks.bench_mujoco [--runs sac:HalfCheetah-v5,td3:HalfCheetah-v5]
[--seeds 0,1] [--timesteps 100000]``; one JSON line per finished run is appended to
``--log`` (default docs/benchmarks/mujoco_runs.jsonl) so that a long session's figures survive
an interruption. Set ``PEERS_PYTHON`` for a peers' venv other than ``.venv-peers``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from .bench_ppo import PEERS_PYTHON, _results, _train_cmd
from .bench_runtime import ROOT
from .ppo_sides import peer_json, run_timed

PEER = ROOT / "tests" / "benchmarks" / "peer_sb3_mujoco.py"
TUNED = ROOT / "rlmesh" / "tuned_examples"
WINDOW = 10
DEFAULT_RUNS = "sac:HalfCheetah-v5,sac:Hopper-v5,td3:HalfCheetah-v5"


def tuned_file(algo: str, env_id: str) -> Path:
    return TUNED / f"{env_id.split('-')[0].lower()}-{algo}.yaml"


def rlmesh_run(algo: str, env_id: str, seed: int, timesteps: int, tmp: Path,
               output: str | None = None, threads: int = 1) -> dict[str, Any]:
    """``output``: also write every sampled step there (Parquet), e.g. a SAC run's replay as
    the offline benchmark's medium-replay dataset. ``threads``: the learner's torch threads
    (``num_cpus_per_learner``; 0: rlmesh's 'auto')."""
    local_dir = tmp / f"{algo}-{env_id}-{seed}"
    stop = json.dumps({"timesteps_total": timesteps})
    config: dict[str, Any] = {"metrics_num_episodes_for_smoothing": WINDOW,
                              "num_cpus_per_learner": threads or "auto"}
    if output:
        config.update(output=output, output_format="parquet")
    cmd = _train_cmd("-f", str(tuned_file(algo, env_id)), "--local-dir", str(local_dir),
                     "--seed", str(seed), "--stop", stop, "--config", json.dumps(config))
    code, _, wall = run_timed(cmd, stdout=subprocess.DEVNULL)
    results = _results(local_dir)
    if code != 0 or not results:
        raise RuntimeError(f"{' '.join(cmd)} exited {code}")
    last = results[-1]
    return {"wall": wall, "timesteps": last["timesteps_total"],
            "return": last["episode_reward_mean"], "inside": last["time_total_s"],
            "threads": threads or "auto"}


def sb3_run(algo: str, env_id: str, seed: int, timesteps: int, threads: int = 1
            ) -> dict[str, Any]:
    python = os.environ.get("PEERS_PYTHON", str(PEERS_PYTHON))
    cmd = [python, str(PEER), "--algo", algo, "--env", env_id, "--seed", str(seed),
           "--timesteps", str(timesteps), "--window", str(WINDOW), "--threads", str(threads)]
    got, wall = peer_json(cmd)
    return {"wall": wall, "timesteps": got["timesteps"], "return": got["episode_reward_mean"],
            "inside": got["learn_s"], "version": got["stable_baselines3"],
            "threads": got["torch_threads"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default=DEFAULT_RUNS, help="algo:env pairs, comma-separated")
    parser.add_argument("--seeds", default="0", help="comma-separated")
    parser.add_argument("--timesteps", type=int, default=100_000)
    parser.add_argument("--sides", default="rlmesh,sb3")
    parser.add_argument("--log", default=str(ROOT / "docs" / "benchmarks" / "mujoco_runs.jsonl"))
    parser.add_argument("--tmp", default="/tmp/bench_mujoco")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads of both sides' learners (0: each side's default; "
                             "1, the rows' setting: the two can run side by side)")
    parser.add_argument("--output", help="rlmesh's runs write their samples under OUTPUT/"
                                         "<algo>-<env>-<seed> (Parquet)")
    args = parser.parse_args()
    sides = args.sides.split(",")
    for pair in args.runs.split(","):
        algo, env_id = pair.split(":")
        for seed in (int(s) for s in args.seeds.split(",")):
            for side in sides:  # take turns, run by run, so load drifts hit both
                load0 = os.getloadavg()[0]
                out = args.output and f"{args.output}/{algo}-{env_id}-{seed}"
                got = (rlmesh_run(algo, env_id, seed, args.timesteps, Path(args.tmp), out,
                                  args.threads)
                       if side == "rlmesh" else sb3_run(algo, env_id, seed, args.timesteps,
                                                        args.threads))
                line = {"side": side, "algo": algo, "env": env_id, "seed": seed,
                        "budget": args.timesteps, **got,
                        "load": round((load0 + os.getloadavg()[0]) / 2, 2)}
                report(line, args.log)


def report(line: dict[str, Any], log: str) -> None:
    """``line`` with the date, printed and appended to the JSON-lines file ``log``: a long
    session's figures survive an interruption."""
    line = {**line, "date": time.strftime("%Y-%m-%d %H:%M")}
    print(json.dumps(line), flush=True)
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as f:
        f.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()
