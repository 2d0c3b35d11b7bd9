"""DQN end to end through the Python API: it learns CartPole, checkpoints keep the target
network, the optimizer and (when asked) the replay buffer, a killed env runner is replaced,
and a continuous action space is refused in one line before any process starts."""

from __future__ import annotations

import math
import os
import signal

import numpy as np
import psutil
import pytest
import torch

from rlmesh.algorithms import Algorithm
from rlmesh.algorithms.dqn import DQNConfig
from rlmesh.config.base import ConfigError


def cartpole_config(**training) -> DQNConfig:
    # rl-zoo's CartPole-v1 DQN (tuned_examples/cartpole-dqn.yaml) on a smaller network.
    return (DQNConfig()
            .environment("CartPole-v1")
            .env_runners(num_env_runners=1, rollout_fragment_length=128,
                         exploration_config={"final_epsilon": 0.04, "epsilon_timesteps": 5000})
            .training(**{"lr": 2.3e-3, "train_batch_size": 64, "training_intensity": 16.0,
                         "num_steps_sampled_before_learning_starts": 1000,
                         "target_network_update_freq": 10, "grad_clip": 10.0, "double_q": False,
                         "dueling": False, "hiddens": [], "n_step": 1,
                         "replay_buffer_config": {"type": "MultiAgentReplayBuffer",
                                                  "capacity": 50_000},
                         "model": {"fcnet_hiddens": [64, 64], "fcnet_activation": "relu"},
                         **training})
            .reporting(min_sample_timesteps_per_iteration=1000)
            .debugging(seed=0))


# ~10k env steps and 2.3k gradient steps: ~15 s alone, ~50 s on 2 cores shared with 5 runs.
@pytest.mark.timeout(240)
def test_dqn_learns_cartpole_and_reports_its_replay():
    with cartpole_config().build() as algo:
        best = -math.inf
        for _ in range(30):
            result = algo.train()
            best = max(best, result["episode_reward_mean"])
            if best >= 60:  # a random policy's mean is ~22 (seed 0 passes 60 near 9k steps)
                break
        assert best >= 60, f"DQN did not learn CartPole: best mean reward {best}"
        stats = result["info"]["learner"]["default_policy"]
        for key in ("total_loss", "mean_q", "mean_td_error", "cur_lr"):
            assert np.isfinite(stats[key]), key
        assert "td_error" not in stats  # the priorities' array stays out of the results
        assert stats["num_target_updates"] >= 1
        # The buffer's arrays are preallocated: its bound is reported from the start.
        assert result["replay_buffer_size_bytes"] == 50_000 * (4 * 4 * 2 + 8 + 4 + 1 + 4)
        assert result["replay_buffer_num_transitions"] == min(result["timesteps_total"], 50_000)
        # training_intensity 16 at batch 64: a quarter gradient step per env step sampled.
        learned = result["timesteps_total"] - 1000
        assert result["num_env_steps_trained"] == pytest.approx(learned * 16, rel=0.05, abs=8192)


# sample_async in an off-policy loop: each round of fragments is sampled while the learner
# takes the gradient steps owed for the one before.
@pytest.mark.timeout(240)
def test_dqn_with_sample_async_learns_and_acts_one_update_behind():
    with cartpole_config().env_runners(sample_async=True).build() as algo:
        results = [algo.train()]
        while max(r["episode_reward_mean"] for r in results) < 60:
            assert len(results) < 30, "DQN with sample_async did not learn CartPole"
            results.append(algo.train())
    learning = [r for r in results if r["num_env_steps_trained"] > 0]
    assert learning and all(r["policy_lag_max"] <= 1 for r in results)
    assert any(r["policy_lag_max"] == 1 for r in learning)


# Noisy nets explore by their noise alone (epsilon off): the random policy's ~22 must rise.
# 271 s in all (collection included) at load 16-20 on 2 cores.
@pytest.mark.timeout(420)
def test_noisy_dqn_learns_cartpole_without_epsilon():
    config = cartpole_config(noisy=True, sigma0=0.5)
    with config.build() as algo:
        best = -math.inf
        for _ in range(30):
            result = algo.train()
            best = max(best, result["episode_reward_mean"])
            if best >= 50:
                break
        assert best >= 50, f"noisy DQN did not learn CartPole: best mean reward {best}"
        weights = algo.get_policy().get_weights()
        assert "a_head.weight_sigma" in weights
        assert np.abs(weights["a_head.weight_sigma"]).mean() > 0


def test_prioritized_double_dueling_nstep_runs_and_moves_priorities():
    config = cartpole_config(double_q=True, dueling=True, hiddens=[32], n_step=3,
                             replay_buffer_config={"type": "MultiAgentPrioritizedReplayBuffer",
                                                   "capacity": 10_000,
                                                   "prioritized_replay_beta_annealing_timesteps": 4000})
    with config.reporting(min_sample_timesteps_per_iteration=500).build() as algo:
        for _ in range(4):
            result = algo.train()
        priorities = algo.replay.tree.values[:len(algo.replay)]
        # New transitions start at the highest priority; trained ones have their TD errors.
        assert len(np.unique(priorities)) > 100
        assert np.isfinite(result["info"]["learner"]["default_policy"]["total_loss"])
        assert result["num_nstep_steps_dropped"] == 0


def test_checkpoint_keeps_target_network_optimizer_and_buffer(tmp_path):
    config = cartpole_config(store_buffer_in_checkpoints=True).reporting(
        min_sample_timesteps_per_iteration=1500)
    obs = np.random.default_rng(0).normal(size=(20, 4)).astype(np.float32)
    with config.build() as algo:
        algo.train()
        algo.train()
        actions = [algo.compute_single_action(o) for o in obs]
        policy = algo.get_policy()
        # Make the target differ from the online network, so a restore that copied the
        # online weights into it would be seen.
        with torch.no_grad():
            for p in policy.target_model.parameters():
                p.add_(0.5)
        target = {k: v.clone() for k, v in policy.target_model.state_dict().items()}
        optimizer = policy.optimizer.state_dict()
        buffer = {k: v[:len(algo.replay)].copy() for k, v in algo.replay.columns.items()}
        path = algo.save(tmp_path / "ckpt")
    assert os.path.isfile(os.path.join(path, "replay.npz"))
    with Algorithm.from_checkpoint(path) as restored:
        assert type(restored).__name__ == "DQN"
        assert [restored.compute_single_action(o) for o in obs] == actions
        policy = restored.get_policy()
        for k, v in policy.target_model.state_dict().items():
            torch.testing.assert_close(v, target[k])
        got = policy.optimizer.state_dict()
        assert got["state"].keys() == optimizer["state"].keys() and got["state"]
        for i, s in optimizer["state"].items():
            torch.testing.assert_close(got["state"][i]["exp_avg_sq"], s["exp_avg_sq"])
            assert float(got["state"][i]["step"]) == float(s["step"])
        assert len(restored.replay) == len(buffer["rewards"])
        for k, v in buffer.items():
            np.testing.assert_array_equal(restored.replay.columns[k][:len(v)], v)
        result = restored.train()
        assert result["training_iteration"] == 3


def test_a_killed_env_runner_is_replaced_and_training_continues():
    config = cartpole_config().env_runners(num_env_runners=2, rollout_fragment_length=32)
    with config.reporting(min_sample_timesteps_per_iteration=300).build() as algo:
        algo.train()
        pids = algo.env_runners.foreach_env_runner("pid")
        os.kill(pids[0], signal.SIGKILL)
        results = [algo.train()]
        while results[-1]["num_env_runner_restarts"] < 1:
            assert len(results) < 60, "the killed runner never came back"
            results.append(algo.train())
        results.append(algo.train())
        assert results[-1]["num_healthy_env_runners"] == 2
        new_pids = algo.env_runners.foreach_env_runner("pid")
        assert new_pids[0] != pids[0] and new_pids[1] == pids[1]
        assert results[-1]["replay_buffer_num_added"] > results[0]["replay_buffer_num_added"]


def test_continuous_actions_and_oversized_buffers_are_refused_before_any_process():
    before = set(psutil.Process().children(recursive=True))
    with pytest.raises(ConfigError) as info:
        DQNConfig().environment("Pendulum-v1").env_runners(num_env_runners=1).build()
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("DQN needs a Discrete action space, got Box(")
    assert "use SAC, TD3 or DDPG" in message
    huge = int(psutil.virtual_memory().total // 49) * 4  # CartPole: 49 bytes a transition
    with pytest.raises(ConfigError, match=r"needs [\d.]+ GiB but this machine has"):
        cartpole_config(replay_buffer_config={"capacity": huge}).build()
    assert set(psutil.Process().children(recursive=True)) <= before
