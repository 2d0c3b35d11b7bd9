"""ES and ARS end to end with runner processes: both learn CartPole past a low bar, a
checkpoint restores the parameters and the observation filter, a runner killed in the
middle of an iteration neither stops the run nor the iteration, and `rlmesh train --run ES`
runs from the command line."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from rlmesh.algorithms.ars import ARSConfig
from rlmesh.algorithms.es import ESConfig

SMALL_TABLE = 1_000_000  # 4 MB: plenty for these policies, quick to make


@pytest.fixture(autouse=True)
def noise_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("RLMESH_NOISE_DIR", str(tmp_path / "noise"))  # runners inherit it


def train_until(algo, bar: float, max_iterations: int) -> tuple[float, dict]:
    best = -math.inf
    for _ in range(max_iterations):
        result = algo.train()
        if not math.isnan(result["episode_reward_mean"]):
            best = max(best, result["episode_reward_mean"])
        if best >= bar:
            break
    return best, result


def test_ars_learns_cartpole_and_its_checkpoint_restores_the_policy(tmp_path):
    config = (ARSConfig().environment("CartPole-v1").env_runners(num_env_runners=2)
              .training(num_rollouts=8, rollouts_used=8, noise_stdev=0.05, sgd_stepsize=0.02,
                        eval_prob=0.2, noise_size=SMALL_TABLE)
              .reporting(metrics_num_episodes_for_smoothing=10)
              .debugging(seed=0))
    with config.build() as algo:
        best, result = train_until(algo, 200, 40)
        assert best >= 200, f"ARS did not learn CartPole: best mean reward {best}"
        stats = result["info"]["learner"]["default_policy"]
        assert stats["num_noisy_episodes"] >= 16 and result["timesteps_total"] > 0
        assert (tmp_path / "noise").is_dir()  # the node's one table, not a copy per runner
        path = algo.save(tmp_path / "ckpt")
        obs = np.array([0.01, 0.2, -0.03, -0.3], np.float32)
        action = algo.compute_single_action(obs)
        theta = algo.get_policy().get_flat()
    restored = ARSConfig.from_dict(config.to_dict()).env_runners(num_env_runners=0).build()
    with restored:
        restored.restore(path)
        np.testing.assert_array_equal(restored.get_policy().get_flat(), theta)
        assert restored.obs_filter.get_state()["n"] > 0
        assert restored.compute_single_action(obs) == action


def test_es_learns_cartpole():
    config = (ESConfig().environment("CartPole-v1").env_runners(num_env_runners=2)
              .training(episodes_per_batch=20, train_batch_size=2000, eval_prob=0.2,
                        noise_size=SMALL_TABLE, model={"fcnet_hiddens": [32, 32]})
              .reporting(metrics_num_episodes_for_smoothing=10)
              .debugging(seed=0))
    with config.build() as algo:
        best, result = train_until(algo, 150, 40)
        assert best >= 150, f"ES did not learn CartPole: best mean reward {best}"
        stats = result["info"]["learner"]["default_policy"]
        assert stats["num_noisy_episodes"] >= 20 and np.isfinite(stats["grad_norm"])


def test_a_runner_killed_mid_iteration_does_not_stop_the_run():
    config = (ESConfig().environment("CartPole-v1").env_runners(num_env_runners=2)
              .training(episodes_per_batch=400, train_batch_size=4000, eval_prob=0.0,
                        noise_size=SMALL_TABLE, model={"fcnet_hiddens": [16]})
              .debugging(seed=0))
    with config.build() as algo:
        # Killed while the iteration's calls are in flight: its share goes to the other. The
        # kill is timed at a third of an iteration as measured here (a fixed 0.5 s landed
        # after the iteration on a fast machine), and a loaded machine can still land it
        # before or after the calls: a few tries, each from two healthy runners.
        took = []
        for _ in range(2):
            start = time.perf_counter()
            algo.train()
            took.append(time.perf_counter() - start)
        for _ in range(3):
            pid = algo.env_runners.foreach_env_runner("pid")[0]
            timer = threading.Timer(min(took) / 3, os.kill, (pid, signal.SIGKILL))
            timer.start()
            result = algo.train()
            timer.join()
            if result["num_fragments_missed_this_iter"] >= 1:
                break
            for _ in range(20):  # landed after the iteration: wait for the runner's return
                if algo.train()["num_healthy_env_runners"] == 2:
                    break
        assert result["num_fragments_missed_this_iter"] >= 1, "the runner was not killed mid-call"
        assert result["info"]["learner"]["default_policy"]["num_noisy_episodes"] >= 400
        for _ in range(20):  # the killed runner comes back and evaluates again
            result = algo.train()
            if result["num_healthy_env_runners"] == 2:
                break
        assert result["num_env_runner_restarts"] >= 1
        assert result["num_healthy_env_runners"] == 2
        assert pid not in algo.env_runners.foreach_env_runner("pid")


def test_rlmesh_train_runs_es_from_the_command_line(tmp_path):
    local = tmp_path / "results"
    run = subprocess.run(
        [sys.executable, "-m", "rlmesh.cli.main", "train", "--run", "ES", "--env", "CartPole-v1",
         "--local-dir", str(local), "--stop", '{"training_iteration": 2}',
         "--config", json.dumps({"episodes_per_batch": 10, "train_batch_size": 200,
                                 "noise_size": SMALL_TABLE, "eval_prob": 0.5,
                                 "model": {"fcnet_hiddens": [8]}}),
         "--checkpoint-at-end"],
        capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout + run.stderr
    (result_file,) = local.glob("*/*/result.json")
    results = [json.loads(line) for line in result_file.read_text().splitlines()]
    assert [r["training_iteration"] for r in results] == [1, 2]
    assert results[-1]["info"]["learner"]["default_policy"]["num_noisy_episodes"] >= 10
    (checkpoint,) = result_file.parent.glob("checkpoint_*")
    replay = subprocess.run([sys.executable, "-m", "rlmesh.cli.main", "rollout", str(checkpoint),
                             "--episodes", "2"], capture_output=True, text=True, timeout=120)
    assert replay.returncode == 0, replay.stdout + replay.stderr


OBS = np.array([0.05, 0.4, -0.03, -0.6], np.float32)


def eval_runner_view(env_runner) -> dict:
    """What an evaluation runner acts with: its policy's class and parameters, its filter's
    statistics, and its action for ``OBS`` (filtered as a step's observation)."""
    policy = env_runner.policy
    x = env_runner.sampler.obs_filter(OBS[None], update=False)
    return {"policy": type(policy).__name__, "theta": policy.get_flat().tolist(),
            "filter": env_runner.sampler.obs_filter.get_state(),
            "action": int(policy.compute_actions(x, explore=False)[0][0])}


@pytest.mark.parametrize("config_class,training", [
    (ESConfig, {"episodes_per_batch": 10, "train_batch_size": 200,
                "model": {"fcnet_hiddens": [8]}}),
    (ARSConfig, {"num_rollouts": 4, "rollouts_used": 4}),
])
def test_evaluation_runners_act_with_the_es_policy(config_class, training):
    """evaluation_interval with ES and ARS: the evaluation runner plays the driver's policy
    (same parameters, same observation filter statistics, same action), every interval."""
    config = (config_class().environment("CartPole-v1").env_runners(num_env_runners=1)
              .training(noise_size=SMALL_TABLE, eval_prob=0.0, **training)
              .evaluation(evaluation_interval=1, evaluation_duration=4,
                          evaluation_num_env_runners=1)
              .debugging(seed=0))
    with config.build() as algo:
        results = [algo.train() for _ in range(3)]
        (runner,) = algo.mesh.eval_runners
        view = algo.mesh.run(runner.call("apply", f"{__name__}:eval_runner_view"))
        driver = algo.get_policy()
        assert view["policy"] == type(driver).__name__
        np.testing.assert_array_equal(view["theta"], driver.get_flat())
        # The driver's statistics of the last iteration, not drifted by evaluation steps.
        assert view["filter"]["n"] == algo.obs_filter.get_state()["n"]
        assert view["action"] == algo.compute_single_action(OBS)
    for r in results:
        ev = r["evaluation"]
        assert ev["episodes_this_iter"] == 4 and ev["num_env_steps_sampled_this_iter"] > 0
        assert ev["episode_reward_mean"] == pytest.approx(np.mean(ev["hist_stats"]["episode_reward"]))
