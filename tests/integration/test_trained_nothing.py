"""A run that trained nothing never exits 0 (issue 48): ``rlmesh train`` whose learner
cannot update (the only trained policy gets no agent: policy_mapping_fn sends the one
CartPole to p0, policies_to_train names p1) warns once during the run and exits 1 with one
line naming the counter and what the config expected. It exited 0 before."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.timeout(180), pytest.mark.usefixtures("no_children_left")]

BOX4 = {"type": "Box", "low": [-5.0] * 4, "high": [5.0] * 4, "dtype": "<f4"}
CONFIG = {"env_config": {"num_agents": 1},
          "policies": {"p0": None, "p1": {"observation_space": BOX4,
                                          "action_space": {"type": "Discrete", "n": 2,
                                                           "start": 0}}},
          "policy_mapping_fn": "tests.integration.multi_agent_envs:cartpole_two",
          "policies_to_train": ["p1"], "num_env_runners": 1, "train_batch_size": 200,
          "minibatch_size": 100, "num_epochs": 1}


def test_rlmesh_train_whose_learner_never_updates_exits_1_with_one_line(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "rlmesh.cli.main", "train", "--run", "PPO", "--env",
         "examples.multi_agent_cartpole:make_env", "--local-dir", str(tmp_path),
         "--config", json.dumps(CONFIG), "--stop", '{"training_iteration": 4}'],
        capture_output=True, text=True, timeout=150, cwd=REPO)
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "Traceback" not in out
    errors = [line for line in run.stderr.splitlines() if line.startswith("rlmesh train: error")]
    assert errors == [
        "rlmesh train: error: trained nothing: num_env_steps_trained is 0 after 800 env steps "
        "sampled in 4 iterations, though the learner should update from 200 on "
        "(num_steps_sampled_before_learning_starts 0 + train_batch_size 200); check that "
        "policies_to_train ['p1'] get agents (policy_mapping_fn), then the run's log for why"]
    # Said during the run too, once, when it first saw it (iteration 3: 600 env steps).
    warnings = [line for line in out.splitlines()
                if "WARNING" in line and "trained nothing" in line]
    assert len(warnings) == 1 and "after 600 env steps sampled in 3 iterations" in warnings[0]
    # The results are all there: the run ran to its stop criterion.
    (result_file,) = tmp_path.glob("*/*/result.json")
    rows = [json.loads(line) for line in result_file.read_text().splitlines()]
    assert [r["training_iteration"] for r in rows] == [1, 2, 3, 4]
    assert all(r["num_env_steps_trained"] == 0 for r in rows)


def test_a_policy_no_agent_maps_to_and_without_spaces_is_one_config_line(tmp_path):
    """Its spaces come from the agents mapped to it; with none and none given there is no
    policy to build: one line (it was a ValueError traceback)."""
    config = {**CONFIG, "policies": {"p0": None, "p1": None}}
    run = subprocess.run(
        [sys.executable, "-m", "rlmesh.cli.main", "train", "--run", "PPO", "--env",
         "examples.multi_agent_cartpole:make_env", "--local-dir", str(tmp_path),
         "--config", json.dumps(config), "--stop", '{"training_iteration": 1}'],
        capture_output=True, text=True, timeout=120, cwd=REPO)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "Traceback" not in run.stderr
    errors = [line for line in run.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "policy 'p1' has no spaces" in errors[0], run.stderr
