"""Offline algorithms count the rows they read and train on as RLlib does: BC's
timesteps_total grows by the steps read, so a stop criterion on it (RLlib's BC files stop at
``timesteps_total: 500000``) ends the run; episodes are only the evaluation's."""

from __future__ import annotations

import json
import subprocess
import sys

from rlmesh.tune.trial import read_results
from tests.integration.test_offline_sharded import _write_dataset

RLMESH = [sys.executable, "-m", "rlmesh.cli.main"]


def test_bc_stops_at_timesteps_total_of_rows_read(tmp_path, no_children_left):
    _write_dataset(tmp_path / "data", num_files=2)
    config = {"input": str(tmp_path / "data"), "train_batch_size": 200,
              "minibatch_size": 100, "model": {"fcnet_hiddens": [16]}}
    run = subprocess.run([*RLMESH, "train", "--run", "BC", "--env", "CartPole-v1",
                          "--config", json.dumps(config),
                          "--stop", json.dumps({"timesteps_total": 1000,
                                                "training_iteration": 50}),
                          "--local-dir", str(tmp_path / "results")],
                         capture_output=True, text=True, timeout=300)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert "stopped: timesteps_total = " in out, out
    (trial,) = [p for p in (tmp_path / "results").glob("*/*") if (p / "result.json").exists()]
    results = read_results(trial)
    counts = [r["timesteps_total"] for r in results]
    assert counts[-1] >= 1000 > counts[-2], counts
    # each iteration reads whole episodes of at least train_batch_size steps
    assert all(b - a >= 200 for a, b in zip([0, *counts], counts)), counts
    last = results[-1]
    assert last["num_env_steps_sampled_lifetime"] == last["num_env_steps_sampled"] == counts[-1]
    assert last["num_env_steps_trained"] == last["num_agent_steps_trained"] == counts[-1]
    assert last["episodes_total"] == 0  # no env stepped for training
