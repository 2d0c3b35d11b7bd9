"""DQN's defaults (issue 54): rlmesh's are tuned for what a user types first (`rlmesh train
--run DQN --env CartPole-v1`); RLlib's own stay one call away, are what RLlib's files get, and
are SimpleQ's and APEX's defaults (their examples were measured on them)."""

from __future__ import annotations

import pytest

from rlmesh.algorithms.apex_config import ApexDQNConfig
from rlmesh.algorithms.dqn_config import DQNConfig
from rlmesh.algorithms.simple_q_config import SimpleQConfig
from rlmesh.cli.train import with_rllib_defaults

RLLIB = {"num_env_runners": 0, "lr": 5e-4, "lr_schedule": None, "train_batch_size": 32,
         "rollout_fragment_length": 4, "training_intensity": None, "grad_clip": 40.0,
         "n_step": 1, "hiddens": [256]}


def pick(config, keys) -> dict:
    data = config.to_dict()
    return {k: data[k] for k in keys}


def test_rlmesh_dqn_defaults_are_the_tuned_cartpole_ones():
    data = DQNConfig().to_dict()
    assert pick(DQNConfig(), RLLIB) == {
        "num_env_runners": 1, "lr": 1e-3, "lr_schedule": [[0, 1e-3], [40_000, 1e-4]],
        "train_batch_size": 64, "rollout_fragment_length": 256, "training_intensity": 32,
        "grad_clip": 10.0, "n_step": 3, "hiddens": []}
    assert data["exploration_config"]["final_epsilon"] == 0.01
    assert data["replay_buffer_config"]["capacity"] == 100_000
    assert data["replay_buffer_config"]["prioritized_replay_beta_annealing_timesteps"] == 100_000
    assert data["model"]["fcnet_hiddens"] == [256, 256]
    assert data["model"]["fcnet_activation"] == "relu"


@pytest.mark.parametrize("stack", ["old", "new"])
def test_rllib_defaults_give_rllibs_dqn(stack):
    config = DQNConfig.rllib_defaults(stack)
    assert pick(config, RLLIB) == RLLIB
    data = config.to_dict()
    assert data["exploration_config"]["final_epsilon"] == 0.02
    assert data["replay_buffer_config"]["capacity"] == 50_000
    assert data["model"]["fcnet_activation"] == "tanh"


def test_simple_q_and_apex_keep_rllibs_values():
    assert pick(SimpleQConfig(), RLLIB) == {**RLLIB, "hiddens": []}
    assert SimpleQConfig().to_dict()["exploration_config"]["final_epsilon"] == 0.02
    apex = pick(ApexDQNConfig(), RLLIB)
    assert apex == {**RLLIB, "num_env_runners": 2, "train_batch_size": 512,
                    "rollout_fragment_length": 50, "n_step": 3}
    # RLlib's defaults for them are theirs, not DQN's.
    assert pick(SimpleQConfig.rllib_defaults("old"), RLLIB) == {**RLLIB, "hiddens": []}
    assert ApexDQNConfig.rllib_defaults("new").to_dict()["num_env_runners"] == 2


def test_an_rllib_dqn_file_gets_rllibs_defaults():
    """A file in RLlib's keys leaves out what meant RLlib's defaults there."""
    file_config = {"num_workers": 0, "exploration_config": {"epsilon_timesteps": 5000}}
    out = with_rllib_defaults(DQNConfig, dict(file_config), file_config, "auto", "a file")
    merged = DQNConfig().update_from_dict(out).to_dict()
    assert merged["lr"] == 5e-4 and merged["n_step"] == 1 and merged["hiddens"] == [256]


def test_a_learning_rate_set_by_the_user_wins_over_the_default_schedule():
    default = DQNConfig()
    assert default.lr_at(0) == 1e-3 and default.lr_at(40_000) == pytest.approx(1e-4)
    assert default.lr_at(20_000) == pytest.approx(5.5e-4)
    mine = DQNConfig().training(lr=2.3e-3)
    assert mine.lr_at(0) == mine.lr_at(100_000) == 2.3e-3
    # A schedule of the user's own replaces lr, as in RLlib.
    scheduled = DQNConfig().training(lr=2.3e-3, lr_schedule=[[0, 1e-2], [10, 1e-2]])
    assert scheduled.lr_at(5) == pytest.approx(1e-2)
    # ... and RLlib's files (no schedule) train at their lr.
    assert DQNConfig.rllib_defaults().training(lr=1e-4).lr_at(50_000) == 1e-4
