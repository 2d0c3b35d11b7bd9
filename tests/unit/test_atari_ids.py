"""ALE ids as ``env`` without ``env_config.atari``: ale-py's ids registered on demand,
DeepMind's preprocessing by default (RLlib's ``preprocessor_pref="deepmind"``), shaped by
the model's Atari keys (dim, grayscale, zero_mean, framestack); a missing ale-py and an
unknown model key are one line each."""

from __future__ import annotations

import sys

import gymnasium as gym
import numpy as np
import pytest

from rlmesh.algorithms import PPOConfig
from rlmesh.config.settings import ConfigError
from rlmesh.env.registry import EnvError, make_env

pytest.importorskip("ale_py", reason="ale-py (the envs extra) is not installed")


def _first_obs(env_id, env_config=None, **kwargs):
    env = make_env(env_id, env_config or {}, **kwargs)
    try:
        obs, _ = env.reset(seed=0)
        obs, *_ = env.step(env.action_space.sample())
        assert env.observation_space.contains(obs)
        return obs
    finally:
        env.close()


@pytest.mark.parametrize("env_id", ["ALE/Pong-v5", "PongNoFrameskip-v4"])
def test_an_ale_id_is_preprocessed_without_env_config_atari(env_id):
    obs = _first_obs(env_id)
    assert obs.shape == (84, 84, 4) and obs.dtype == np.uint8


def test_the_model_keys_set_frame_size_colour_scaling_and_stack():
    assert _first_obs("ALE/Pong-v5", model={"dim": 42}).shape == (42, 42, 4)
    assert _first_obs("ALE/Pong-v5", model={"dim": 42, "grayscale": False}).shape == (42, 42, 12)
    scaled = _first_obs("ALE/Pong-v5", model={"zero_mean": True})
    assert scaled.dtype == np.float32 and scaled.min() >= -1.0 and scaled.max() <= 1.0
    assert scaled.min() < 0  # [-1, 1], not [0, 1]
    # the model's framestack stacks instead (wrap_for_model), so frames are stacked once
    assert _first_obs("ALE/Pong-v5", model={"framestack": 4}).shape == (84, 84)


def test_env_config_atari_still_decides_and_preprocessor_pref_turns_the_default_off():
    assert _first_obs("ALE/Pong-v5", {"atari": False}).shape == (210, 160, 3)
    assert _first_obs("ALE/Pong-v5", preprocessor_pref="rllib").shape == (210, 160, 3)
    assert _first_obs("ALE/Pong-v5", {"atari": {"screen_size": 42}}, model={"dim": 64},
                      preprocessor_pref=None).shape == (42, 42, 4)


def test_a_missing_ale_py_is_one_line_naming_the_extra(monkeypatch):
    monkeypatch.delitem(gym.envs.registry, "ALE/Pong-v5")
    monkeypatch.setitem(sys.modules, "ale_py", None)  # import ale_py raises ImportError
    with pytest.raises(EnvError, match=r"needs ale-py .*pip install 'rlmesh\[envs\]'") as info:
        make_env("ALE/Pong-v5")
    assert "\n" not in str(info.value)


def test_rllib_atari_model_keys_load_and_an_unknown_model_key_names_the_closest():
    config = PPOConfig().environment("ALE/Pong-v5").training(
        model={"dim": 42, "grayscale": True, "zero_mean": False})
    config.validate()
    with pytest.raises(ConfigError, match="unknown model_config key 'dimm': did you mean 'dim'"):
        PPOConfig().environment("ALE/Pong-v5").training(model={"dimm": 42}).validate()
    with pytest.raises(ConfigError, match="model dim .* must be an int >= 1"):
        PPOConfig().training(model={"dim": 0}).validate()
