"""One PPO iteration on ``ALE/Pong-v5`` named as RLlib users name it: no env_config.atari,
RLlib's Atari model keys, a real runner process; the policy, the runner's frames and the
driver agree on the preprocessed shape."""

from __future__ import annotations

import numpy as np
import pytest

from rlmesh.algorithms import PPOConfig

pytest.importorskip("ale_py", reason="ale-py (the envs extra) is not installed")


def test_ppo_trains_one_iteration_on_an_ale_id_with_rllib_atari_model_keys():
    config = (PPOConfig()
              .environment("ALE/Pong-v5")
              .env_runners(num_env_runners=1, num_envs_per_env_runner=2,
                           rollout_fragment_length=16)
              .training(train_batch_size=32, minibatch_size=32, num_epochs=1,
                        model={"dim": 42, "grayscale": True, "zero_mean": False,
                               "fcnet_hiddens": [32]})
              .debugging(seed=0))
    with config.build() as algo:
        result = algo.train()
        policy = algo.get_policy()
        assert policy.observation_space.shape == (42, 42, 4)
        assert policy.observation_space.dtype == np.uint8
        frames = np.zeros((42, 42, 4), np.uint8)
        assert algo.compute_single_action(frames, explore=False) in range(6)
    assert result["num_env_steps_sampled_this_iter"] >= 32
