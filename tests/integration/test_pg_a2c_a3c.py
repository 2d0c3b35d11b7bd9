"""PG, A2C and A3C end to end with env-runner processes: each learns CartPole past a low
bar, A2C's microbatches train, and A3C applies every runner's gradients and sends each
runner its own weights."""

from __future__ import annotations

import math

import numpy as np

from rlmesh.algorithms.a2c import A2CConfig
from rlmesh.algorithms.a3c import A3CConfig
from rlmesh.algorithms.pg import PGConfig

SMALL_MODEL = {"fcnet_hiddens": [64, 64]}


def train_until(algo, bar: float, max_iterations: int) -> tuple[float, dict]:
    """Train until the mean episode reward reaches ``bar``; the best mean and last result."""
    best = -math.inf
    for _ in range(max_iterations):
        result = algo.train()
        best = max(best, result["episode_reward_mean"])
        if best >= bar:
            break
    return best, result


def test_pg_learns_cartpole_from_complete_episodes():
    config = (PGConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=1)
              .training(lr=0.0004, train_batch_size=200)
              .debugging(seed=0))
    with config.build() as algo:
        best, result = train_until(algo, 100, 150)
        assert best >= 100, f"PG did not learn CartPole: best mean reward {best}"
        # complete_episodes: every step sampled was trained on, each batch >= 200 steps.
        assert result["num_env_steps_trained"] == result["timesteps_total"]
        assert result["num_env_steps_sampled_this_iter"] >= 200
        stats = result["info"]["learner"]["default_policy"]
        assert np.isfinite(stats["policy_loss"]) and stats["mean_return"] > 0


def test_a2c_learns_cartpole_with_microbatches():
    config = (A2CConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=2, num_envs_per_env_runner=4)
              .training(lr=0.002, train_batch_size=128, microbatch_size=48, model=SMALL_MODEL)
              .debugging(seed=0))
    with config.build() as algo:
        best, result = train_until(algo, 100, 400)
        assert best >= 100, f"A2C did not learn CartPole: best mean reward {best}"
        stats = result["info"]["learner"]["default_policy"]
        assert stats["num_grad_updates"] == 1  # one step per train batch, microbatches or not
        assert result["num_env_steps_sampled_this_iter"] == 128
        for key in ("policy_loss", "vf_loss", "entropy", "gradients_norm"):
            assert np.isfinite(stats[key]), key


def test_a3c_applies_every_runners_gradients_and_sends_each_its_own_weights():
    config = (A3CConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=2)
              .training(lr=0.001, gamma=0.95, train_batch_size=500, model=SMALL_MODEL)
              .reporting(min_time_s_per_reporting=5)
              .debugging(seed=0))
    with config.build() as algo:
        policy = algo.get_policy()
        updates = 0
        best, result = -math.inf, {}
        for _ in range(60):
            result = algo.train()
            stats = result["info"]["learner"]["default_policy"]
            updates += stats["num_grad_updates"]
            # Each gradient is one fragment of rollout_fragment_length (10) steps.
            assert stats["num_env_steps_trained"] == 10 * stats["num_grad_updates"]
            best = max(best, result["episode_reward_mean"])
            if best >= 60 and result["training_iteration"] >= 3:
                break
        assert best >= 60, f"A3C did not learn CartPole: best mean reward {best}"
        assert policy.num_updates == updates  # every gradient that came was applied
        assert result["num_env_steps_trained"] == 10 * updates
        assert result["timesteps_total"] == 10 * updates
        runners = algo.env_runners.foreach_env_runner("metrics")
        # A runner gets weights before each of its fragments but the first, far more often
        # than the param server publishes them (once per iteration).
        for m in runners:
            assert m["num_fragments"] > result["training_iteration"] + 5, m
            assert m["num_weight_updates"] >= m["num_fragments"] - 1, m
        assert sum(m["num_fragments"] for m in runners) >= updates
