"""A sweep whose trials ask for more CPUs than this 2-core machine runs them as `rlmesh
train` runs such a config: one at a time, oversubscribed, with one warning for the sweep,
instead of refusing them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rlmesh.tune.trial import read_results

RLMESH = [sys.executable, "-m", "rlmesh.cli.main"]

# driver 1 + 3 env runners + 1 evaluation runner: 5 CPUs asked of 2
BIG = """\
too-big:
  run: PPO
  env: CartPole-v1
  stop: {training_iteration: 1}
  config:
    num_env_runners: 3
    evaluation_interval: 1
    evaluation_num_env_runners: 1
    evaluation_duration: 2
    train_batch_size: 192
    minibatch_size: 64
    num_epochs: 1
    lr: {grid_search: [0.0001, 0.001]}
"""


def test_trials_bigger_than_the_machine_run_one_at_a_time(tmp_path, no_children_left):
    (tmp_path / "big.yaml").write_text(BIG)
    local = tmp_path / "results"
    run = subprocess.run([*RLMESH, "train", "-f", str(tmp_path / "big.yaml"),
                          "--local-dir", str(local)],
                         capture_output=True, text=True, timeout=300)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert out.count("oversubscribed, its processes sharing the cores") == 1, out
    assert "asks for 5 CPUs and this machine has" in out, out
    assert out.count("(CPU 2, oversubscribed); 1 running") == 2, out  # never 2 running
    state = json.loads((local / "too-big" / "experiment_state.json").read_text())
    assert [t["status"] for t in state["trials"]] == ["TERMINATED"] * 2, out
    spans = []
    for t in state["trials"]:
        results = read_results(t["dir"])
        assert [r["training_iteration"] for r in results] == [1]
        assert results[-1]["evaluation"]["episodes_this_iter"] >= 1
        launched = (Path(t["dir"]) / "trial_spec.json").stat().st_mtime
        spans.append((launched, results[-1]["timestamp"]))  # its last result, whole seconds
    (_, end_a), (start_b, _) = sorted(spans)
    assert start_b >= end_a, spans  # the second started after the first's last result
