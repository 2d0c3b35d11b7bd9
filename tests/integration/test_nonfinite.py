"""NaN and inf in training data, as a buggy env hands them to a running job (issue 15, point
2): with on_nonfinite "raise" (the default) the run stops with one line naming the env or
policy and the value; with "skip" the bad episodes and updates are dropped and counted, and
the weights stay finite."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rlmesh.algorithms import PPOConfig
from tests.integration.test_policy_errors import assert_one_line_error

REPO = Path(__file__).resolve().parents[2]
ENV = "tests.integration.hostile_envs:PoisonedCartPole"
pytestmark = [pytest.mark.timeout(180), pytest.mark.usefixtures("no_children_left")]


def config(env_config: dict, on_nonfinite: str, runners: int = 1) -> PPOConfig:
    return (PPOConfig().environment(ENV, env_config=env_config)
            .env_runners(num_env_runners=runners)
            .training(train_batch_size=1000, minibatch_size=250, num_epochs=2)
            .fault_tolerance(on_nonfinite=on_nonfinite))


def rlmesh_train(tmp_path: Path, env_config: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rlmesh.cli.main", "train", "--run", "PPO", "--env", ENV,
         "--local-dir", str(tmp_path), "--stop", '{"training_iteration": 3}', "--config",
         f'{{"num_env_runners": 1, "train_batch_size": 1000, "env_config": {env_config}}}'],
        capture_output=True, text=True, timeout=150, cwd=REPO)



def all_finite(weights: dict) -> bool:
    return all(np.isfinite(np.asarray(w)).all() for p in weights.values() for w in p.values())


def test_an_env_returning_a_nan_observation_stops_the_run_with_one_line(tmp_path):
    run = rlmesh_train(tmp_path, '{"obs": "nan", "at": 5}')
    assert_one_line_error(run, "NonFiniteError", "env_runner-1", "observation (nan)", "on_nonfinite")


@pytest.mark.parametrize("poison", [{"obs": "nan"}, {"reward": "inf"}, {"reward": "-inf"},
                                    {"reward": 1e39}])  # 1e39: finite, but inf as float32
def test_skip_drops_the_poisoned_episodes_and_counts_them(poison):
    with config({**poison, "every": 3}, "skip").build() as algo:
        for _ in range(2):
            result = algo.train()
        weights = algo.get_weights()
    assert result["num_nonfinite_steps_skipped"] >= 2
    assert math.isfinite(result["episode_reward_mean"]) and result["episode_reward_mean"] < 500
    stats = result["info"]["learner"]["default_policy"]
    assert math.isfinite(stats["total_loss"]) and stats["num_nonfinite_updates_skipped"] == 0
    assert all_finite(weights)


def test_a_non_finite_update_is_never_applied(tmp_path):
    # 3e38 is a finite float32 reward; its returns overflow in the loss.
    with config({"reward": 3e38, "every": 1}, "skip", runners=0).build() as algo:
        before = algo.get_weights()
        result = algo.train()
        after = algo.get_weights()
    assert result["num_nonfinite_updates_skipped"] >= 1
    assert result["info"]["learner"]["default_policy"]["num_nonfinite_updates_skipped"] >= 1
    assert all_finite(after)
    assert all(np.array_equal(before[p][k], after[p][k]) for p in before for k in before[p])
    run = rlmesh_train(tmp_path, '{"reward": 3e38}')
    assert_one_line_error(run, "NonFiniteError", "policy 'default_policy'", "non-finite update",
                   "not applied")
