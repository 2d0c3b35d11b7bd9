"""Rainbow-style DQN (distributional C51 heads with noisy nets, dueling, double Q, 3-step
returns and prioritized replay, all at once), SimpleQ and SoftQ exploration end to end: each
learns CartPole past a random policy, SimpleQ from the CLI by name, and their checkpoints
restore as the algorithm that wrote them."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from rlmesh.algorithms import Algorithm
from rlmesh.algorithms.dqn import DQNConfig
from rlmesh.algorithms.simple_q import SimpleQConfig

# test_dqn.py's fast CartPole loop (rl-zoo's, on a smaller network): big fragments, a
# quarter gradient step per env step.
FAST = {"lr": 2.3e-3, "train_batch_size": 64, "training_intensity": 16.0,
        "num_steps_sampled_before_learning_starts": 1000, "target_network_update_freq": 10,
        "grad_clip": 10.0, "model": {"fcnet_hiddens": [64, 64], "fcnet_activation": "relu"}}


def fast(config, **training):
    return (config.environment("CartPole-v1")
            .env_runners(num_env_runners=1, rollout_fragment_length=128,
                         exploration_config={"final_epsilon": 0.04, "epsilon_timesteps": 5000})
            .training(**{**FAST, **training})
            .reporting(min_sample_timesteps_per_iteration=1000)
            .debugging(seed=0))


def rainbow():
    # Returns of CartPole at gamma 0.99 stay under 100: the support covers them.
    return fast(DQNConfig(), num_atoms=21, v_min=0.0, v_max=100.0, noisy=True, dueling=True,
                double_q=True, hiddens=[32], n_step=3,
                replay_buffer_config={"type": "MultiAgentPrioritizedReplayBuffer",
                                      "capacity": 50_000})


def learn(algo, threshold: float, iterations: int = 30) -> dict:
    best = -math.inf
    for _ in range(iterations):
        result = algo.train()
        best = max(best, result["episode_reward_mean"])
        if best >= threshold:
            return result
    raise AssertionError(f"{type(algo).__name__} did not learn CartPole: best mean {best}")


# A random policy's mean is ~22.
@pytest.mark.timeout(420)
def test_rainbow_dqn_learns_cartpole_with_every_part_on(tmp_path):
    obs = np.random.default_rng(0).normal(size=(20, 4)).astype(np.float32)
    with rainbow().build() as algo:
        result = learn(algo, 50)
        stats = result["info"]["learner"]["default_policy"]
        assert np.isfinite(stats["total_loss"]) and 0 < stats["mean_q"] <= 100
        # The priorities are the cross-entropies (>= 0), not the initial maximum alone.
        priorities = algo.replay.tree.values[:len(algo.replay)]
        assert len(np.unique(priorities)) > 100
        weights = algo.get_policy().get_weights()
        assert weights["support"].shape == (21,) and "a_head.weight_sigma" in weights
        actions = [algo.compute_single_action(o, explore=False) for o in obs]
        path = algo.save(tmp_path / "ckpt")
    with Algorithm.from_checkpoint(path) as restored:
        assert type(restored).__name__ == "DQN" and restored.config.num_atoms == 21
        assert [restored.compute_single_action(o, explore=False) for o in obs] == actions


@pytest.mark.timeout(420)
def test_simple_q_learns_cartpole_and_restores_as_simple_q(tmp_path):
    with fast(SimpleQConfig()).build() as algo:
        learn(algo, 50)
        policy = algo.get_policy()
        assert not policy.config.double_q and not policy.config.prioritized_replay
        path = algo.save(tmp_path / "ckpt")
    with Algorithm.from_checkpoint(path) as restored:
        assert type(restored).__name__ == "SimpleQ"
        assert restored.train()["training_iteration"] == algo.iteration + 1


# RLlib's cartpole-dqn-softq.yaml explores this way (no epsilon): 150 at 17k env steps.
@pytest.mark.timeout(420)
def test_softq_exploration_learns_cartpole():
    config = fast(DQNConfig(), double_q=False, dueling=False, hiddens=[]).env_runners(
        exploration_config={"type": "SoftQ", "temperature": 0.5})
    with config.build() as algo:
        learn(algo, 50)


@pytest.mark.timeout(300)
def test_cli_trains_simple_q_by_name_and_rolls_its_checkpoint_out(tmp_path):
    rlmesh = [sys.executable, "-m", "rlmesh.cli.main"]
    run = subprocess.run([*rlmesh, "train", "--run", "SimpleQ", "--env", "CartPole-v1",
                          "--local-dir", str(tmp_path), "--stop", '{"timesteps_total": 2000}',
                          "--checkpoint-at-end"], capture_output=True, text=True, timeout=200)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    (params,) = tmp_path.glob("*/*/params.json")
    assert json.loads(params.read_text())["double_q"] is False
    last = json.loads((params.parent / "result.json").read_text().splitlines()[-1])
    assert last["timesteps_total"] >= 2000
    (checkpoint,) = params.parent.glob("checkpoint_*")
    replay = subprocess.run([*rlmesh, "rollout", str(checkpoint), "--episodes", "2"],
                            capture_output=True, text=True, timeout=120)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert sum(line.startswith("episode") for line in replay.stdout.splitlines()) == 2
