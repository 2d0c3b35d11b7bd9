"""Sweeps of PPO as a user runs them: ``rlmesh train -f`` on a file with a 2x2 grid runs
two trials at a time on this 2-core machine (each asks 1 CPU of the placement scheduler),
finishes every trial, ranks them right, and ``rlmesh analyze`` plots each trial."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from rlmesh.tune.trial import read_results

RLMESH = [sys.executable, "-m", "rlmesh.cli.main"]

GRID = """\
cartpole-grid:
  run: PPO
  env: CartPole-v1
  stop: {training_iteration: 2}
  config:
    num_env_runners: 1
    num_cpus_per_env_runner: 0   # the driver's CPU only: two trials fit on two cores
    train_batch_size: 256
    minibatch_size: 64
    num_epochs: 1
    lr: {grid_search: [0.0001, 0.001]}
    gamma: {grid_search: [0.9, 0.99]}
"""


def test_ppo_grid_runs_two_at_a_time_and_ranks_trials(tmp_path, no_children_left):
    (tmp_path / "grid.yaml").write_text(GRID)
    local = tmp_path / "results"
    run = subprocess.run([*RLMESH, "train", "-f", str(tmp_path / "grid.yaml"),
                          "--local-dir", str(local), "--max-concurrent-trials", "3"],
                         capture_output=True, text=True, timeout=400)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    # The scheduler's decisions: never more than the 2 CPUs hold, and a trial waiting.
    running = [int(n) for n in re.findall(r"placed on local \(CPU 1\); (\d) running", out)]
    assert len(running) == 4 and max(running) == 2, out
    assert re.search(r"scheduler: PPO_CartPole-v1_0000\d waits .*needs CPU 1", out), out
    exp = local / "cartpole-grid"
    state = json.loads((exp / "experiment_state.json").read_text())
    assert [t["status"] for t in state["trials"]] == ["TERMINATED"] * 4
    # The best config, from each trial's own result.json, against what the sweep says.
    finals = {}
    for t in state["trials"]:
        results = read_results(t["dir"])
        assert [r["training_iteration"] for r in results] == [1, 2]
        finals[(t["config"]["lr"], t["config"]["gamma"])] = results[-1]["episode_reward_mean"]
    assert sorted(finals) == [(0.0001, 0.9), (0.0001, 0.99), (0.001, 0.9), (0.001, 0.99)]
    best = max(finals, key=finals.get)
    assert f'best config: {{"lr": {best[0]}, "gamma": {best[1]}}}' in out, (finals, out)
    assert (exp / "summary.txt").read_text().startswith("trial")

    analyzed = subprocess.run([*RLMESH, "analyze", str(exp), "--metric",
                               "info/learner/default_policy/entropy", "--mode", "min"],
                              capture_output=True, text=True, timeout=120)
    assert analyzed.returncode == 0, analyzed.stdout + analyzed.stderr
    lines = [ln for ln in analyzed.stdout.splitlines() if ln.startswith("PPO_CartPole-v1_")]
    entropies = [float(ln.split()[3]) for ln in lines]
    assert len(lines) == 4 and entropies == sorted(entropies), analyzed.stdout
    pngs = sorted(p.name for p in (exp / "plots").glob("*.png"))
    assert len(pngs) == 5 and all(Path(exp / "plots" / p).read_bytes()[:4] == b"\x89PNG"
                                  for p in pngs)
