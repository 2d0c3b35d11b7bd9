"""Evaluation runners end to end: results every evaluation_interval under evaluation/, on
runners apart from the training ones, for every algorithm family; an env that never ends
cannot hang evaluation; `rlmesh train --stop` reads evaluation metrics."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from rlmesh.algorithms import ConfigError, PPOConfig
from rlmesh.driver.algorithm_registry import get_config_class

ENDLESS = "tests.integration.envs_for_tests:make_count_env"  # no terminate_at: never ends


def small_ppo(env="CartPole-v1", **evaluation) -> PPOConfig:
    return (PPOConfig().environment(env)
            .env_runners(num_env_runners=1, rollout_fragment_length=100)
            .training(train_batch_size=200, minibatch_size=100, num_epochs=1)
            .evaluation(**evaluation).debugging(seed=0))


def test_evaluation_every_interval_on_runners_of_its_own():
    config = small_ppo(evaluation_interval=2, evaluation_duration=3,
                       evaluation_num_env_runners=2)
    with config.build() as algo:
        results = [algo.train() for _ in range(4)]
        evaluated = [r["training_iteration"] for r in results if "evaluation" in r]
        assert evaluated == [2, 4]
        for r in results:
            if "evaluation" not in r:
                continue
            ev = r["evaluation"]
            assert ev["episodes_this_iter"] == 3  # split 2 + 1 over the two runners
            assert ev["num_partial_episodes"] == 0
            assert ev["episode_reward_mean"] == pytest.approx(
                sum(ev["hist_stats"]["episode_reward"]) / 3)
            assert ev["num_healthy_env_runners"] == 2
            assert ev["training_iteration"] == r["training_iteration"]
            # The training runners were not used: one training runner, its own counts.
            assert r["num_healthy_env_runners"] == 1
        names = sorted(h.name for h in algo.mesh.eval_runners)
        assert names == ["eval_runner-1", "eval_runner-2"]
        # Explore is off in evaluation unless evaluation_config turns it on.
        explore = algo.mesh.run(algo.mesh.eval_runners[0].call(
            "apply", "tests.integration.test_evaluation:runner_explore"))
        assert explore is False
        assert algo.evaluate()["evaluation"]["episodes_this_iter"] == 3


def runner_explore(env_runner) -> bool:
    return env_runner.config.explore


def test_evaluation_config_is_validated_as_config_keys():
    with pytest.raises(ConfigError, match="evaluation_config.*'explore'"):
        small_ppo(evaluation_interval=1, evaluation_config={"explor": False}).validate()


def test_an_endless_episode_is_cut_and_reported_partial():
    config = small_ppo(ENDLESS, evaluation_interval=1, evaluation_duration=2,
                       evaluation_max_steps_per_episode=50)
    with config.build() as algo:
        ev = algo.train()["evaluation"]
    assert ev["episodes_this_iter"] == 0 and math.isnan(ev["episode_reward_mean"])
    assert ev["num_partial_episodes"] == 2
    assert ev["partial_episode_reward_mean"] == 50.0  # CountEnv: reward 1 a step


def test_evaluation_time_budget_ends_a_long_evaluation():
    config = small_ppo(ENDLESS, evaluation_duration=1, evaluation_sample_timeout_s=1.0,
                       evaluation_max_steps_per_episode=10**9,
                       evaluation_config={"env_config": {"step_sleep_s": 0.002}})
    with config.build() as algo:
        ev = algo.evaluate()["evaluation"]
    assert ev["timed_out"] is True
    assert ev["episodes_this_iter"] == 0 and ev["num_partial_episodes"] == 1
    assert ev["num_env_steps_sampled_this_iter"] > 0


def test_timesteps_unit_reports_the_running_episode_as_partial():
    config = small_ppo(ENDLESS, evaluation_duration=30, evaluation_duration_unit="timesteps")
    with config.build() as algo:
        ev = algo.evaluate()["evaluation"]
    assert ev["num_env_steps_sampled_this_iter"] == 30
    assert ev["num_partial_episodes"] == 1 and ev["partial_episode_reward_mean"] == 30.0


def test_evaluation_parallel_to_training():
    config = small_ppo(evaluation_interval=1, evaluation_duration=2,
                       evaluation_num_env_runners=1, evaluation_parallel_to_training=True)
    with config.build() as algo:
        r = algo.train()
    assert r["evaluation"]["episodes_this_iter"] == 2
    with pytest.raises(ConfigError, match="evaluation_num_env_runners"):
        small_ppo(evaluation_interval=1, evaluation_parallel_to_training=True).validate()


@pytest.mark.parametrize("run,env,settings", [
    ("IMPALA", "CartPole-v1", {"train_batch_size": 100, "rollout_fragment_length": 50,
                               "min_time_s_per_reporting": 0.1, "num_env_runners": 1}),
    ("APPO", "CartPole-v1", {"train_batch_size": 100, "rollout_fragment_length": 50,
                             "min_time_s_per_reporting": 0.1, "num_env_runners": 1}),
    ("DQN", "CartPole-v1", {"num_steps_sampled_before_learning_starts": 32,
                            "train_batch_size": 32, "min_sample_timesteps_per_iteration": 64,
                            "rollout_fragment_length": 16}),
    ("SAC", "Pendulum-v1", {"num_steps_sampled_before_learning_starts": 32,
                            "train_batch_size": 32, "min_sample_timesteps_per_iteration": 64,
                            "rollout_fragment_length": 16}),
])
def test_every_algorithm_family_evaluates(run, env, settings):
    # Off-policy algorithms sample in the driver (num_env_runners 0), evaluating there too.
    config = get_config_class(run).from_dict({
        "env": env, "num_env_runners": 0, "evaluation_interval": 1, "evaluation_duration": 1,
        "evaluation_max_steps_per_episode": 100, **settings})
    with config.build() as algo:
        ev = algo.train()["evaluation"]
    assert ev["episodes_this_iter"] + ev["num_partial_episodes"] == 1
    assert ev["num_env_steps_sampled_this_iter"] > 0


def rlmesh_train(tmp_path: Path, config: dict, stop: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rlmesh.cli.main", "train", "--run", "PPO", "--env",
         "CartPole-v1", "--local-dir", str(tmp_path), "--config",
         json.dumps({"num_env_runners": 0, "train_batch_size": 100, "minibatch_size": 100,
                     "rollout_fragment_length": 100, "num_epochs": 1, **config}),
         "--stop", json.dumps(stop)],
        capture_output=True, text=True, timeout=240)


def test_cli_stops_on_an_evaluation_metric(tmp_path):
    out = rlmesh_train(tmp_path, {"evaluation_interval": 2, "evaluation_duration": 1},
                       {"evaluation/episode_reward_mean": 1, "training_iteration": 10})
    assert out.returncode == 0, out.stderr
    assert "stopped: evaluation/episode_reward_mean" in out.stdout
    assert "evaluation: reward_mean" in out.stdout  # under the progress table's row
    rows = [json.loads(line) for line in
            next(tmp_path.glob("*/*/result.json")).read_text().splitlines()]
    assert [r["training_iteration"] for r in rows] == [1, 2]


def test_cli_misspelled_evaluation_stop_key_is_an_error_at_the_first_evaluation(tmp_path):
    out = rlmesh_train(tmp_path, {"evaluation_interval": 2, "evaluation_duration": 1},
                       {"evaluation/episode_reward_maen": 1, "training_iteration": 10})
    assert out.returncode == 2
    assert "'evaluation/episode_reward_maen' is not in the results" in out.stderr
    assert "evaluation/episode_reward_mean" in out.stderr  # the closest keys named
    rows = next(tmp_path.glob("*/*/result.json")).read_text().splitlines()
    assert len(rows) == 2  # checked when the first evaluation came, not before


def test_cli_evaluation_stop_key_without_evaluation_is_an_error(tmp_path):
    out = rlmesh_train(tmp_path, {}, {"evaluation/episode_reward_mean": 1})
    assert out.returncode == 2
    assert "needs evaluation results: set evaluation_interval" in out.stderr
    assert not list(tmp_path.glob("*/*/result.json"))  # before any process started
