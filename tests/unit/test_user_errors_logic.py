"""The pure checks behind issue 36's one-line errors, from Python: each raises a clear
exception type with a message naming the setting or the file (no processes here)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmesh.algorithms.ppo_config import PPOConfig
from rlmesh.config.batch_memory import check_batch_memory
from rlmesh.config.settings import ConfigError
from rlmesh.driver.checkpoints import CheckpointError, check_state
from rlmesh.env.registry import EnvError, make_env, missing_module_error
from rlmesh.rl.spec import check_model_config

CARTPOLE = (gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2))


@pytest.mark.parametrize("model,words", [
    ({"fcnet_hiddens": "64"}, "fcnet_hiddens must be a list of layer sizes"),
    ({"fcnet_hiddens": [64, 0]}, "fcnet_hiddens must be a list"),
    ({"post_fcnet_hiddens": [1.5]}, "post_fcnet_hiddens must be a list"),
    ({"lstm_cell_size": "256"}, "lstm_cell_size must be an int"),
    ({"use_lstm": "yes"}, "use_lstm must be True or False"),
    ({"framestack": -2}, "framestack must be True, False or an int"),
    ({"log_std_init": "0"}, "log_std_init must be a number"),
    ({"fcnet_hidden": [64]}, "did you mean 'fcnet_hiddens'"),
    ({"use_lstm": True, "custom_model": "pkg.mod:Net"}, "use_lstm wraps the default model, "
     "and custom_model 'pkg.mod:Net' replaces it"),
    ({"use_attention": True}, "'use_attention' is RLlib's.*use_lstm gives the model memory"),
    ({"attention_dim": 64}, "'attention_dim' is RLlib's.*use_lstm"),
    ({"lstm_use_prev_action_reward": True}, "set lstm_use_prev_action and lstm_use_prev_reward"),
])
def test_model_config_values_of_the_wrong_type_are_named(model, words):
    with pytest.raises(ValueError, match=words):
        check_model_config(model)


def test_model_config_of_the_right_types_passes():
    config = check_model_config({"fcnet_hiddens": [], "post_fcnet_hiddens": [np.int64(8)],
                                 "framestack": 4, "log_std_init": -2})
    assert config["fcnet_hiddens"] == [] and config["framestack"] == 4


def test_a_batch_past_memory_is_a_config_error_naming_the_setting():
    config = PPOConfig().environment("CartPole-v1").training(train_batch_size=4000)
    check_batch_memory(config, *CARTPOLE, memory=1 << 30)  # 4000 steps: far below 1 GiB
    with pytest.raises(ConfigError, match=r"train_batch_size: 4,000 steps of 31 bytes"):
        check_batch_memory(config, *CARTPOLE, memory=100_000)
    config = config.training(train_batch_size=200).env_runners(rollout_fragment_length=10**6)
    with pytest.raises(ConfigError, match="rollout_fragment_length"):
        check_batch_memory(config, *CARTPOLE, memory=1 << 20)


def test_a_missing_env_module_names_the_module():
    with pytest.raises(EnvError, match="needs the module 'nosuchsim_pkg_36', which is not installed"):
        make_env("nosuchsim_pkg_36:NoSuchSim-v0")
    deep = ModuleNotFoundError("No module named 'pybullet.envs'", name="pybullet.envs")
    assert "pip install pybullet" in str(missing_module_error("my.envs:make", deep))
    assert missing_module_error("x:y", ValueError("other")) is None


def _state(**model):
    return {"policies": {"default_policy": {"model": model, "optimizer": {}}}}


@pytest.mark.parametrize("state,words", [
    ({}, "holds no policy states"),
    ({"policies": {}}, "holds no policy states"),
    ({"policies": {"default_policy": [1, 2]}}, "is a list, not a map"),
    (_state(w=torch.tensor([1.0, float("nan")])), r"non-finite weights \(nan in 'w'\)"),
    (_state(w=torch.tensor([float("inf")])), r"non-finite weights \(inf in 'w'\)"),
    ({"policies": {"p": {"weights": {"w": np.array([np.nan], np.float32)}}}}, "policy 'p'"),
])
def test_a_learner_state_that_cannot_be_loaded_is_a_checkpoint_error(state, words):
    with pytest.raises(CheckpointError, match=words):
        check_state("ckpt", state)


def test_a_finite_learner_state_passes():
    check_state("ckpt", _state(w=torch.ones(3), steps=torch.tensor([7])))
    check_state("ckpt", {"policies": {"p": {"weights": {"w": np.ones(2, np.float32)}}}})


@pytest.mark.parametrize("sampling,words", [
    ({"rollout_fragment_length": 16}, r"max_seq_len: 32 is longer than rollout_fragment_length 16,"),
    ({"num_envs_per_env_runner": 64}, r"rollout_fragment_length 16 \('auto': train_batch_size "
                                      r"2048 over 128 envs\)"),
])
def test_a_sequence_longer_than_the_fragment_is_refused_naming_both(sampling, words):
    from rlmesh.algorithms import PPOConfig
    from rlmesh.config import ConfigError

    config = (PPOConfig().environment("CartPole-v1").env_runners(**sampling)
              .training(train_batch_size=2048, model={"use_lstm": True, "max_seq_len": 32}))
    with pytest.raises(ConfigError, match=words):
        config.validate()
    # Sequences as long as the fragment, whole episodes, or no LSTM: accepted.
    config.training(model={"use_lstm": True, "max_seq_len": 16}).validate()
    config.training(model={"use_lstm": False, "max_seq_len": 32}).validate()
    config.training(model={"use_lstm": True, "max_seq_len": 32}).env_runners(
        batch_mode="complete_episodes").validate()
    # The default length on a shorter fragment (A2C's 16 steps): sequences end with it.
    config.training(model={"use_lstm": True, "max_seq_len": 20}).env_runners(
        batch_mode="truncate_episodes",
        **sampling).validate()
