"""``normalize_rewards: 'auto'``, PPO's default (issue 54): on for Box actions, off for the
others and wherever rlmesh does not normalize (a MultiAgentEnv's runner), never an error;
True where it cannot be done still is one; RLlib's PPO defaults and the other algorithms
keep False."""

from __future__ import annotations

from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest

from rlmesh.algorithms.dqn_config import DQNConfig
from rlmesh.algorithms.ppo_config import PPOConfig
from rlmesh.algorithms.sac_config import SACConfig
from rlmesh.config.base import ConfigError
from rlmesh.roles.runner_sampler import check_rewards, rewards_normalized

BOX = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
DISCRETE = gym.spaces.Discrete(2)


@pytest.mark.parametrize("setting, space, expected", [
    ("auto", BOX, True), ("auto", DISCRETE, False), (True, DISCRETE, True),
    (True, BOX, True), (False, BOX, False), (False, DISCRETE, False)])
def test_which_runners_normalize(setting, space, expected):
    assert rewards_normalized(SimpleNamespace(normalize_rewards=setting), space) is expected


def test_auto_is_quiet_where_rewards_are_not_normalized():
    check_rewards("multi_agent", SimpleNamespace(normalize_rewards="auto"))
    with pytest.raises(ValueError, match="normalize_rewards"):
        check_rewards("multi_agent", SimpleNamespace(normalize_rewards=True))


def test_ppo_defaults_to_auto_and_rllibs_ppo_and_the_others_to_false():
    assert PPOConfig().normalize_rewards == "auto"
    assert PPOConfig.rllib_defaults().normalize_rewards is False
    assert PPOConfig.rllib_defaults("new").normalize_rewards is False
    assert DQNConfig().normalize_rewards is False and SACConfig().normalize_rewards is False
    assert PPOConfig().update_from_dict({"normalize_rewards": False}).normalize_rewards is False


def test_a_wrong_value_is_refused():
    config = PPOConfig().update_from_dict({"normalize_rewards": "sometimes"})
    with pytest.raises(ConfigError, match="normalize_rewards: expected bool or 'auto'"):
        config.validate()
