"""RLlib's whole config surface: every key RLlib 2.60's config classes report (both API
stacks' keys; rllib_2_60_defaults.json) loads into the rlmesh config of the same algorithm at
RLlib's default value, as a setting, an alias, a translation or a key with no effect here;
the keys rlmesh refuses at other values say what to do in one line; and
``rllib_defaults("new")`` reproduces RLlib's defaults on every key the two share."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlmesh.driver.algorithm_registry import get_config_class
from rlmesh.config import rllib
from rlmesh.config.base import ConfigError

HERE = Path(__file__).parent
# What RLlib reports about itself (XConfig().to_dict()): the new stack (Ray 2.60,
# dump_rllib_defaults.py) and the classic stack (Ray 2.5.1, 2.7.2 and 2.9.3 merged, the
# newest value of each key: the same script run in a venv of each).
STACKS = {"new": json.loads((HERE / "rllib_2_60_defaults.json").read_text())["defaults"],
          "old": json.loads((HERE / "rllib_old_stack_defaults.json").read_text())["defaults"]}
CASES = [(stack, name) for stack, algos in STACKS.items() for name in sorted(algos)]
DEPRECATED = -1  # RLlib's DEPRECATED_VALUE: a key it only keeps to warn about
# Keys whose RLlib default has no rlmesh equivalent to compare with (each says why).
NOT_COMPARED = {
    "env", "env_config", "callbacks", "policies", "policy_mapping_fn", "policies_to_train",
    "seed", "log_level", "framework", "observation_space", "action_space", "input",
    "input_config", "evaluation_config",
    "num_learners",  # RLlib's IMPALA/APPO: 1 learner actor; rlmesh's learner is in the driver
    "num_aggregation_workers",  # RLlib: its aggregator actors (a deprecated -1 here)
    "output_compress_columns",  # RLlib compresses by pickling; rlmesh never does
    "off_policy_estimation_methods",  # [] and {} both mean none
    "enable_connectors",  # deprecated in RLlib
    "max_requests_in_flight_per_env_runner",  # credits, not RLlib's request count
    "gym_env_vectorize_mode",  # None: RLlib's "sync" (the runner's loop) or the entry point
    "exploration_config",  # the new stack moved exploration into its modules ({})
    "replay_buffer_config",  # the new stack's episode buffers: compared below
    "q_model_config", "policy_model_config",  # the new stack's extra keys are None/[]
    "min_sample_timesteps_per_iteration",  # SAC: RLlib 100 with fragments of 1 step
    "rollout_fragment_length",  # 'auto' in the new stack's DQN/SAC; a fixed length here
    "lr",  # SAC's lr is None in RLlib (its three rates are separate): compared as rates
    "replay_buffer_num_slots", "target_network_update_freq", "use_critic",  # APPO: below
    "batch_mode",  # BC/MARWIL: rlmesh reads whole episodes (complete_episodes)
    # Left at rlmesh's on purpose (rllib_defaults.py says why):
    "recreate_failed_workers", "restart_failed_env_runners", "noise_size",
    "num_cpus_per_learner_worker", "num_cpus_per_learner",  # 'auto' means RLlib's 1 on CPU
    "evaluation_num_workers", "train_batch_size_per_learner",
    "smooth_target_policy",  # TD3: (True,) in RLlib 2.5-2.9, a trailing comma; True here
}
NOT_COMPARED_FOR = {("old", "A3C"): {"train_batch_size"}}


@pytest.mark.parametrize("stack, name", CASES)
def test_every_rllib_key_loads_at_its_default(stack, name):
    cls = get_config_class(name)
    refused = []
    for key, value in STACKS[stack][name].items():
        if value == DEPRECATED:
            continue
        try:
            cls.from_dict({key: value})
        except ConfigError as e:
            refused.append(f"{key}={value!r}: {e}")
    assert not refused, "\n".join(refused)


@pytest.mark.parametrize("stack, name", CASES)
def test_rllib_defaults_match_rllibs_own(stack, name):
    ours = get_config_class(name).rllib_defaults(stack)
    names = {spelling: row.name for row in type(ours).fields_table()
             for spelling in (row.key, *row.aliases)}
    skip = NOT_COMPARED | NOT_COMPARED_FOR.get((stack, name), set())
    differ = {}
    for key, value in STACKS[stack][name].items():
        if key in skip or key not in names or value == DEPRECATED:
            continue
        mine = getattr(ours, names[key])
        if key == "model":  # the keys rlmesh's models read
            read = ("fcnet_hiddens", "fcnet_activation") + (
                () if name in ("DQN", "SAC") else ("vf_share_layers",))  # no value head
            mine = {k: mine.get(k) for k in read}
            value = {k: value.get(k) for k in mine}
        if mine != value and not (isinstance(value, float) and mine == pytest.approx(value)):
            differ[key] = (mine, value)
    assert not differ, f"rlmesh's rllib_defaults({stack!r}) differ from RLlib's: {differ}"


@pytest.mark.parametrize("config, message", [
    ({"soft_horizon": True}, "soft_horizon: rlmesh cannot honour soft_horizon=True"),
    ({"_rl_module_spec": "x"}, "rl_module_spec: expected an RLModuleSpec or a MultiRLModuleSpec"),
    ({"callbacks_on_episode_end": "pkg:fn"}, "define a callbacks class with the method "
                                             "on_episode_end"),
    ({"optimizer": {"max_weight_sync_delay": 400}}, "only APEX's optimizer dict"),
    ({"num_gpus": 1.5}, "not a whole number above 1"),
    ({"exploration_config": {"type": "EpsilonGreedy"}}, "samples from its policy's"),
    ({"input": "dataset"}, "needs input_config.paths"),
])
def test_what_rlmesh_cannot_honour_is_one_line_saying_what_to_do(config, message):
    with pytest.raises(ConfigError) as err:
        get_config_class("PPO").from_dict(config).validate()
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_issues_table_loads():
    """The keys the issue listed as refused, each with the value RLlib's files give it."""
    ppo = get_config_class("PPO").from_dict({
        "framework": "tf", "num_gpus": 0.5, "horizon": 200, "_enable_rl_module_api": True,
        "_enable_learner_api": True, "min_time_s_per_iteration": 1,
        "metrics_smoothing_episodes": 5})
    ppo.validate()
    assert (ppo.framework_str, ppo.num_gpus_per_learner, ppo.horizon) == ("torch", 0.5, 200)
    assert ppo.min_time_s_per_iteration == 1 and ppo.metrics_num_episodes_for_smoothing == 5
    apex = get_config_class("APEX").from_dict({"optimizer": {
        "max_weight_sync_delay": 400, "num_replay_buffer_shards": 4, "debug": False}})
    assert apex.num_replay_buffer_shards == 4
    sac = get_config_class("SAC").from_dict({"optimization": {
        "actor_learning_rate": 3e-4, "critic_learning_rate": 3e-4,
        "entropy_learning_rate": 3e-4}})
    sac.validate()
    assert sac.optimization_config["critic_learning_rate"] == 3e-4
    bc = get_config_class("BC").from_dict({"input": "dataset", "input_config": {
        "format": "json", "paths": "/data/cartpole"}, "output_config": {"format": "json"}})
    assert bc.input_ == "/data/cartpole" and bc.input_config == {"format": "json"}
    assert get_config_class("PPO").rllib_defaults().lr == 5e-5


def test_num_gpus_means_the_learners_gpus():
    ppo = get_config_class("PPO")
    assert ppo.from_dict({"num_gpus": 1}).num_gpus_per_learner == 1
    two = ppo.from_dict({"num_gpus": 2})
    assert (two.num_learners, two.num_gpus_per_learner) == (2, 1)
    assert ppo().resources(num_gpus=0.25).num_gpus_per_learner == 0.25


def test_the_old_multiagent_dict_and_new_stack_schedules_map():
    c = get_config_class("PPO").from_dict({
        "multiagent": {"policies": ["a", "b"], "policy_mapping_fn": "pkg.mod:fn",
                       "policies_to_train": ["a"]},
        "lr": [[0, 1e-3], [10_000, 1e-4]], "model_config": {"fcnet_hiddens": [32]}})
    assert c.policies_to_train == ["a"] and c.policy_mapping_fn == "pkg.mod:fn"
    assert c.lr_schedule == [[0, 1e-3], [10_000, 1e-4]] and c.lr == 1e-3
    assert c.model["fcnet_hiddens"] == [32]
    dqn = get_config_class("DQN").from_dict({"epsilon": [[0, 1.0], [5000, 0.05]],
                                             "replay_buffer_config": {
                                                 "type": "PrioritizedEpisodeReplayBuffer",
                                                 "alpha": 0.5, "beta": 0.4}})
    assert dqn.exploration_config["epsilon_timesteps"] == 5000
    assert dqn.exploration_config["final_epsilon"] == 0.05
    assert dqn.replay_settings()["prioritized_replay_alpha"] == 0.5
    dqn.validate()


def test_a_file_is_told_apart_by_its_stack():
    assert rllib.stack_of({"framework": "torch", "num_workers": 2}) == "old"
    assert rllib.stack_of({"num_env_runners": 2}) == "new"
    assert rllib.stack_of({"enable_rl_module_and_learner": True}) == "new"


def test_docs_name_every_key_of_the_tables():
    doc = (Path(__file__).parents[2] / "docs" / "rllib.md").read_text()
    keys = set(rllib.TRANSLATIONS) | set(rllib.NO_EFFECT) | set(rllib.REFUSED)
    missing = sorted(k for k in keys if f"`{k}" not in doc and f" {k}" not in doc)
    assert not missing, f"docs/rllib.md does not say what these RLlib keys become: {missing}"
