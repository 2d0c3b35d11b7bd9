"""Recurrent training end to end (real runner processes): PPO with use_lstm learns a task
that needs memory, recall of the first observation at the last step, where the same PPO
with the default MLP stays at chance; the learned LSTM acts with state through
compute_single_action."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rlmesh.algorithms import PPOConfig
from tests.integration.envs_for_tests import RepeatFirstEnv

SYMBOLS = 4  # chance: 1/4


def memory_config(use_lstm: bool) -> PPOConfig:
    return (PPOConfig().environment(RepeatFirstEnv, env_config={"num_symbols": SYMBOLS,
                                                                "length": 4})
            .env_runners(num_env_runners=1, num_envs_per_env_runner=16,
                         rollout_fragment_length=32)
            .training(lr=3e-3, train_batch_size=512, minibatch_size=128, num_epochs=4,
                      gamma=0.9, entropy_coeff=0.01,
                      model={"fcnet_hiddens": [32], "use_lstm": use_lstm,
                             "lstm_cell_size": 32, "max_seq_len": 8})
            .debugging(seed=0))


def train(config: PPOConfig, max_steps: int, target: float | None = None):
    algo = config.build()
    means = []
    while True:
        result = algo.train()
        means.append(result["episode_reward_mean"])
        if result["timesteps_total"] >= max_steps or (target and means[-1] >= target):
            return algo, result["timesteps_total"], means


def test_ppo_with_lstm_learns_to_remember_where_the_mlp_cannot():
    mlp, mlp_steps, mlp_means = train(memory_config(False), 15_000)
    mlp.stop()
    plateau = float(np.mean(mlp_means[-5:]))
    algo, steps, means = train(memory_config(True), 40_000, target=0.9)
    try:
        print(f"\nrepeat-the-first-observation ({SYMBOLS} symbols, chance {1 / SYMBOLS:.2f}): "
              f"MLP plateau {plateau:.2f} (mean of its last 5 iterations, {mlp_steps} steps); "
              f"LSTM {means[-1]:.2f} after {steps} steps")
        assert plateau < 0.45, f"the MLP should not beat chance by much: {plateau:.2f}"
        assert means[-1] >= 0.9, f"PPO with use_lstm did not learn the memory task: {means}"
        # The learned policy with its state, one episode at a time, as a user acts with it.
        env, policy = RepeatFirstEnv({"num_symbols": SYMBOLS}), algo.get_policy()
        wins = 0
        for episode in range(20):
            obs, _ = env.reset(seed=episode)
            state, done = policy.get_initial_state(), False
            while not done:
                action, state, _ = algo.compute_single_action(obs, state=state)
                obs, reward, done, _, _ = env.step(action)
            wins += reward
        assert wins >= 16, f"compute_single_action with state recalled {wins} of 20"
    finally:
        algo.stop()


def test_rollout_of_a_recurrent_checkpoint_carries_the_state(tmp_path):
    """rlmesh rollout's loop with an LSTM checkpoint: the state goes from step to step, so
    a trained memory policy still recalls; from the initial state at every step it could
    not."""
    from rlmesh.driver.inference import InferencePolicy
    from rlmesh.cli.rollout import run_episodes

    algo, _, means = train(memory_config(True), 40_000, target=0.9)
    try:
        path = algo.save(tmp_path / "ckpt")
    finally:
        algo.stop()
    policy = InferencePolicy.from_checkpoint(path, trust_code=True)  # the env is a test module
    returns: list[float] = []
    run_episodes(policy, RepeatFirstEnv({"num_symbols": SYMBOLS}), None, 40, False, 0, returns,
                 out=lambda line: None)
    assert np.mean(returns) >= 0.8, returns


RLMESH = [sys.executable, "-m", "rlmesh.cli.main"]


def rlmesh_train(local_dir: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([*RLMESH, "train", *args, "--local-dir", str(local_dir)],
                          capture_output=True, text=True, timeout=timeout)


def result_rows(local_dir: Path) -> list[dict]:
    """The rows of the one run's result.json under ``local_dir``."""
    (result_file,) = local_dir.glob("*/*/result.json")
    return [json.loads(line) for line in result_file.read_text().splitlines()]


@pytest.mark.timeout(300)
def test_the_tuned_example_learns_cartpole_without_velocities(tmp_path):
    """stateless-cartpole-ppo.yaml as a user runs it, on rlmesh.env.stateless's
    StatelessCartPole (positions only): a low bar in a short run, where the MLP's memoryless
    policy cannot tell which way the pole is falling (the tuned run reaches 475:
    docs/observations_and_memory.md)."""
    run = rlmesh_train(tmp_path, "-f", "stateless-cartpole-ppo.yaml", "--seed", "0", "--stop",
                       json.dumps({"episode_reward_mean": 150, "timesteps_total": 60_000}))
    assert run.returncode == 0, run.stdout + run.stderr
    rows = result_rows(tmp_path)
    assert rows[-1]["episode_reward_mean"] >= 150, [r["episode_reward_mean"] for r in rows]
    config = json.loads(next(tmp_path.glob("*/*/params.json")).read_text())
    assert config["model"]["use_lstm"] and config["env"] == "rlmesh.env.stateless:StatelessCartPole"


@pytest.mark.timeout(180)
def test_the_appo_example_trains_on_pendulum_without_velocity(tmp_path):
    """stateless-pendulum-appo.yaml (APPO without V-trace, an LSTM, Box actions) as a user
    runs it, for two iterations: the critic's own LSTM already explains part of the
    normalized returns, and every update was finite (the tuned run reaches -200:
    docs/observations_and_memory.md)."""
    run = rlmesh_train(tmp_path, "-f", "stateless-pendulum-appo.yaml", "--seed", "0",
                       "--stop", json.dumps({"training_iteration": 2}))
    assert run.returncode == 0, run.stdout + run.stderr
    rows = result_rows(tmp_path)
    stats = rows[-1]["info"]["learner"]["default_policy"]
    assert np.isfinite(stats["total_loss"]) and stats["vf_explained_var"] > 0.2, stats
    assert rows[-1]["num_nonfinite_updates_skipped"] == 0
    assert rows[-1]["num_env_steps_trained"] > rows[-1]["num_env_steps_sampled"]  # 10 epochs


@pytest.mark.parametrize("config,words", [
    ({"rollout_fragment_length": 16, "model": {"use_lstm": True, "max_seq_len": 32}},
     "max_seq_len: 32 is longer than rollout_fragment_length 16"),
    ({"model": {"use_lstm": True, "custom_model": "torch.nn:Linear"}},
     "use_lstm wraps the default model, and custom_model 'torch.nn:Linear' replaces it"),
    ({"model": {"use_attention": True}}, "'use_attention' is RLlib's, not rlmesh's"),
])
def test_an_lstm_setting_that_cannot_work_is_one_line_naming_both(tmp_path, config, words):
    run = rlmesh_train(tmp_path, "--run", "PPO", "--env", "rlmesh.env.stateless:StatelessCartPole",
                       "--config", json.dumps(config), timeout=60)
    assert run.returncode == 2, run.stdout + run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], run.stderr
    assert not list(tmp_path.glob("*/*/result.json"))  # nothing started
