"""gymnasium vector envs end to end, in real runner processes: PPO learns CartPole through
gymnasium's numpy CartPoleVectorEnv (picked by "auto" for many envs), the driver's probe,
evaluation and compute_single_action use one env of the same id, EnvPool's Pendulum trains,
and a vector env asked for where there is none is refused in one line at build."""

from __future__ import annotations

import numpy as np
import pytest

from rlmesh.algorithms.ppo import PPOConfig


def kinds(runner) -> list:
    """A runner's sampler kind and vector batch (foreach_env_runner's function)."""
    return [runner.sampler_kind, int(runner.sampler.num_envs)]


def cartpole(**env_config) -> PPOConfig:
    return (PPOConfig().environment("CartPole-v1", env_config=env_config)
            .env_runners(num_env_runners=2, num_envs_per_env_runner=256,
                         rollout_fragment_length=16)
            .training(train_batch_size=8192, minibatch_size=2048, num_epochs=4, lr=3e-3,
                      gamma=0.99, entropy_coeff=0.0, vf_clip_param=None,
                      model={"fcnet_hiddens": [64, 64]})
            .evaluation(evaluation_interval=None)
            .reporting(metrics_num_episodes_for_smoothing=20)
            .debugging(seed=0))


def test_ppo_learns_cartpole_through_the_numpy_vector_env():
    with cartpole().build() as algo:
        assert algo.env_runners.foreach_env_runner(
            "apply", "tests.integration.test_gym_vector:kinds") == [["vector", 256]] * 2
        best = 0.0
        for i in range(25):
            result = algo.train()
            steps = result["num_env_steps_sampled_this_iter"]
            # One round of 2 x 256 envs x 16 rows a batch: reset rows fill it as steps would.
            assert 0.8 * 8192 < steps <= 8192
            if i == 0:  # ~200 envs end an episode: counted, though each fragment lists 20
                assert result["episodes_this_iter"] > 100
            best = max(best, result["episode_reward_mean"])
            if best >= 150:
                break
        assert best >= 150, f"mean return {best} after {result['timesteps_total']} steps"
        # Every row the learner counted was a real env step (reset rows masked out).
        fragment = algo.mesh.runners.sample(2 * 256 * 16)[0]
        assert fragment["env_steps"] == int(fragment["mask"].sum())
        assert fragment["obs"].shape == (16, 256, 4)
        # One env of the same id serves the driver (no vector key reaches gym.make).
        action = algo.compute_single_action(np.zeros(4, np.float32), explore=False)
        assert action in (0, 1)


def test_envpool_pendulum_trains_through_the_vector_env():
    pytest.importorskip("envpool")
    config = (PPOConfig().environment("Pendulum-v1", env_config={"vector": "envpool"})
              .env_runners(num_env_runners=1, num_envs_per_env_runner=64,
                           rollout_fragment_length=32)
              .training(train_batch_size=2048, minibatch_size=512, num_epochs=2)
              .debugging(seed=0))
    with config.build() as algo:
        results = [algo.train() for _ in range(8)]
        assert results[-1]["timesteps_total"] >= 0.9 * 8 * 2048  # reset rows are not steps
        assert results[-1]["episodes_total"] >= 64  # 200-step episodes, ended by EnvPool
        assert -2000 < results[-1]["episode_reward_mean"] < 0
        assert algo.env_runners.foreach_env_runner(
            "apply", "tests.integration.test_gym_vector:kinds") == [["vector", 64]]


def test_a_vector_env_asked_where_there_is_none_is_one_line_at_build():
    config = (PPOConfig().environment("Acrobot-v1", env_config={"vector": True})
              .env_runners(num_env_runners=1, num_envs_per_env_runner=64))
    with pytest.raises(Exception) as err:
        config.build().stop()
    line = str(err.value)
    assert "'Acrobot-v1' has no vector entry point" in line and "'envpool'" in line
