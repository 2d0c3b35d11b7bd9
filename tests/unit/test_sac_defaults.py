"""SAC's defaults (issue 54): rlmesh's are tuned for `rlmesh train --run SAC --env
Pendulum-v1` (fragments of 4 at one gradient step per env step, uniform replay from step 256,
critic and temperature at 1e-3); RLlib's stay one call away and are what RLlib's files get;
CQL, built on SAC's config, keeps its own; rlmesh's tuned SAC files set every one of them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rlmesh.algorithms.cql_config import CQLConfig
from rlmesh.algorithms.sac_config import SACConfig
from rlmesh.cli.train import with_rllib_defaults

ROOT = Path(__file__).resolve().parents[2]
KEYS = ("rollout_fragment_length", "training_intensity",
        "num_steps_sampled_before_learning_starts", "optimization_config")
RLLIB = {"rollout_fragment_length": 1, "training_intensity": None,
         "num_steps_sampled_before_learning_starts": 1500,
         "optimization_config": {"actor_learning_rate": 3e-4, "critic_learning_rate": 3e-4,
                                 "entropy_learning_rate": 3e-4}}


def pick(config) -> dict:
    data = config.to_dict()
    return {**{k: data[k] for k in KEYS}, "replay": data["replay_buffer_config"]["type"]}


def test_rlmesh_sac_defaults_are_the_measured_pendulum_ones():
    assert pick(SACConfig()) == {
        "rollout_fragment_length": 4, "training_intensity": 256,
        "num_steps_sampled_before_learning_starts": 256,
        "optimization_config": {"actor_learning_rate": 3e-4, "critic_learning_rate": 1e-3,
                                "entropy_learning_rate": 1e-3},
        "replay": "MultiAgentReplayBuffer"}
    # still one 256-row gradient step per env step, as at RLlib's fragments of 1
    config = SACConfig()
    assert config.training_intensity / config.train_batch_size == 1.0


@pytest.mark.parametrize("stack", ["old", "new"])
def test_rllib_defaults_give_rllibs_sac(stack):
    assert pick(SACConfig.rllib_defaults(stack)) == {
        **RLLIB, "replay": "MultiAgentPrioritizedReplayBuffer"}


def test_an_rllib_sac_file_gets_rllibs_defaults():
    file_config = {"num_workers": 0, "framework": "torch", "tau": 0.005}
    out = with_rllib_defaults(SACConfig, dict(file_config), file_config, "auto", "a file")
    merged = pick(SACConfig().update_from_dict(out))
    assert merged == {**RLLIB, "replay": "MultiAgentPrioritizedReplayBuffer"}


@pytest.mark.parametrize("config", [CQLConfig(), CQLConfig.rllib_defaults()])
def test_cql_keeps_its_own(config):
    assert pick(config) == {
        "rollout_fragment_length": 1, "training_intensity": None,
        "num_steps_sampled_before_learning_starts": 0,
        "optimization_config": {"actor_learning_rate": 1e-4, "critic_learning_rate": 3e-4,
                                "entropy_learning_rate": 1e-4},
        "replay": "MultiAgentReplayBuffer"}


@pytest.mark.parametrize("path", sorted((ROOT / "rlmesh/tuned_examples").glob("*-sac.yaml")),
                         ids=lambda p: p.name)
def test_tuned_sac_files_set_what_the_defaults_changed(path):
    file_config = next(iter(yaml.safe_load(path.read_text()).values()))["config"]
    missing = {"rollout_fragment_length", "training_intensity",
               "num_steps_sampled_before_learning_starts", "replay_buffer_config",
               "optimization_config"} - set(file_config)
    assert not missing, missing


def test_sac_iterations_are_an_episode_of_pendulum_and_rllibs_stay_rllibs():
    """Stop rules are read after each iteration: rlmesh's SAC reads them every 200 env steps
    (one Pendulum episode), RLlib's every 100 (and 1 s), both stacks."""
    assert SACConfig().min_sample_timesteps_per_iteration == 200
    for stack in ("old", "new"):
        config = SACConfig.rllib_defaults(stack)
        assert (config.min_sample_timesteps_per_iteration, config.min_time_s_per_iteration) \
            == (100, 1)
        assert CQLConfig.rllib_defaults(stack).min_sample_timesteps_per_iteration == 100
    assert CQLConfig().min_sample_timesteps_per_iteration == 1000  # unchanged
