"""AlgorithmConfig/PPOConfig: builders derived from the fields, aliases, error messages,
validation, dict round trips, schedules and the 'auto' fragment length."""

from __future__ import annotations

import dataclasses
import json
import logging

import pytest

from rlmesh.rl.spec import MODEL_DEFAULTS

from rlmesh.algorithms import AlgorithmConfig, ConfigError, PPOConfig
from rlmesh.algorithms.appo_config import APPOConfig
from rlmesh.algorithms.impala_config import ImpalaConfig
from rlmesh.config.base import GROUPS
from rlmesh.config.schedules import validate_schedule, value_at


class MyCallbacks:  # module level, so it has an import path
    pass


# --- builders ---

def test_builders_chain_and_return_self():
    config = PPOConfig()
    out = (config.environment("CartPole-v1", env_config={"max_episode_steps": 50})
           .env_runners(num_env_runners=4, num_envs_per_env_runner=8)
           .training(lr=3e-4, gamma=0.98, model={"fcnet_hiddens": [64, 64]})
           .learners(num_learners=2, num_gpus_per_learner=1)
           .callbacks(MyCallbacks)
           .framework("torch")
           .resources(num_cpus_for_main_process=2)
           .debugging(seed=7, log_level="INFO"))
    assert out is config
    assert (config.env, config.env_config) == ("CartPole-v1", {"max_episode_steps": 50})
    assert (config.num_env_runners, config.num_envs_per_env_runner) == (4, 8)
    assert (config.lr, config.gamma, config.num_learners, config.seed) == (3e-4, 0.98, 2, 7)
    assert config.callbacks_class is MyCallbacks
    # model merges key by key, as RLlib's .training(model=...) does
    assert config.model == {**MODEL_DEFAULTS, "fcnet_hiddens": [64, 64],
                            "fcnet_activation": "tanh", "vf_share_layers": False}
    config.validate()


def test_builder_leaves_unmentioned_settings_alone():
    config = PPOConfig().environment("CartPole-v1").environment(env_config={"a": 1})
    assert config.env == "CartPole-v1"
    assert PPOConfig().environment(env=None).env is None  # None is a value, not "unset"


@pytest.mark.parametrize("cls", [AlgorithmConfig, PPOConfig, ImpalaConfig, APPOConfig])
def test_every_setting_is_set_by_exactly_its_groups_builder(cls):
    builders = {g: getattr(cls, g) for g in GROUPS}
    for row in cls.fields_table():
        value = getattr(cls(), row.name)
        for group, builder in builders.items():
            config = cls()
            if group == row.group:
                builder(config, **{row.key: value})
                assert getattr(config, row.name) == value
            else:
                with pytest.raises(ConfigError, match=rf"set it with \.{row.group}\("):
                    builder(config, **{row.key: value})


def test_every_setting_has_a_doc_and_a_known_group():
    rows = PPOConfig.fields_table()
    assert {r.group for r in rows} | {r.group for r in APPOConfig.fields_table()} == set(GROUPS)
    assert all(len(r.doc) > 20 for r in rows + APPOConfig.fields_table())
    assert {r.key for r in PPOConfig.fields_table("training")} >= {"lambda", "lr", "clip_param"}


# --- aliases and lambda ---

@pytest.mark.parametrize("alias, name, value", [
    ("num_workers", "num_env_runners", 3),
    ("num_rollout_workers", "num_env_runners", 3),
    ("num_envs_per_worker", "num_envs_per_env_runner", 5),
    ("sgd_minibatch_size", "minibatch_size", 64),
    ("num_sgd_iter", "num_epochs", 7),
    ("lambda", "lambda_", 0.95),
    ("lambda_", "lambda_", 0.95),
    ("callbacks", "callbacks_class", "pkg.mod:Callbacks"),
    ("num_learner_workers", "num_learners", 2),
])
def test_aliases_in_from_dict_and_builders(alias, name, value):
    assert getattr(PPOConfig.from_dict({alias: value}), name) == value
    group = next(r.group for r in PPOConfig.fields_table() if r.name == name)
    config = getattr(PPOConfig(), group)(**{alias: value})
    assert getattr(config, name) == value


def test_lambda_keyword_through_training_and_to_dict():
    config = PPOConfig().training(**{"lambda": 0.9})
    assert config.lambda_ == 0.9
    assert config.to_dict()["lambda"] == 0.9 and "lambda_" not in config.to_dict()


def test_alias_use_is_silent_at_warning_level(caplog):
    with caplog.at_level(logging.INFO):
        PPOConfig.from_dict({"num_workers": 1, "sgd_minibatch_size": 32, "num_sgd_iter": 2})
    assert caplog.records == []


# --- unknown keys ---

@pytest.mark.parametrize("typo, suggestion", [
    ("lamda", "'lambda'?"),
    ("gama", "'gamma'?"),
    ("lr_schedul", "'lr_schedule'?"),
    ("entropy_coef", "'entropy_coeff'?"),
    ("num_env_runner", "'num_env_runners'?"),
    ("num_worker", "'num_env_runners'?"),  # close to an alias: suggest the current name
    ("train_batch", "'train_batch_size'?"),
])
def test_unknown_key_names_the_closest(typo, suggestion):
    with pytest.raises(ConfigError) as err:
        PPOConfig.from_dict({typo: 1})
    assert str(err.value) == f"unknown config key {typo!r}; did you mean {suggestion}"
    with pytest.raises(ValueError, match="did you mean"):  # ConfigError is a ValueError
        PPOConfig().training(**{typo: 1})


def test_unknown_key_with_nothing_close():
    # (evaluation_interval was the example here until the evaluation group came)
    with pytest.raises(ConfigError, match=r"'xyzzy_quux' \(PPOConfig.fields_table"):
        PPOConfig.from_dict({"xyzzy_quux": 5})


def test_ppo_keys_are_unknown_to_the_base_config():
    with pytest.raises(ConfigError, match="clip_param"):
        AlgorithmConfig().training(clip_param=0.2)


# --- validate ---

@pytest.mark.parametrize("changes, message", [
    ({"lr": -1e-3}, "lr: expected >= 0, got -0.001"),
    ({"gamma": 1.5}, "gamma: expected <= 1, got 1.5"),
    ({"num_env_runners": -1}, "num_env_runners: expected >= 0, got -1"),
    ({"num_env_runners": 2.5}, "num_env_runners: expected int, got 2.5"),
    ({"num_epochs": True}, "num_epochs: expected int, got True"),
    ({"batch_mode": "episodes"},
     "batch_mode: expected 'truncate_episodes' or 'complete_episodes', got 'episodes'"),
    ({"rollout_fragment_length": "full"},
     "rollout_fragment_length: expected int or 'auto', got 'full'"),
    ({"rollout_fragment_length": 0}, "rollout_fragment_length: expected > 0, got 0"),
    ({"minibatch_size": 8000}, "minibatch_size: expected <= the train batch per learner (2048)"),
    ({"train_batch_size_per_learner": 100}, "minibatch_size: expected <= the train batch per "
                                            "learner (100), got 128"),
    ({"framework": "jax"}, "framework: expected 'torch'"),
    ({"lambda": 1.2}, "lambda: expected <= 1, got 1.2"),
    ({"clip_param": 0}, "clip_param: expected > 0, got 0"),
    ({"use_gae": False}, "use_gae: batch_mode 'truncate_episodes' needs GAE"),
    ({"use_critic": False}, "use_critic: GAE needs the value function"),
    ({"lr_schedule": [[100, 1e-3], [0, 1e-4]]}, "lr_schedule: timesteps must be >= 0 and"),
    ({"lr_schedule": [[0, "fast"]]}, "lr_schedule: expected [int timestep, number value]"),
    ({"train_batch_size": 10, "minibatch_size": 10, "num_envs_per_env_runner": 8},
     "rollout_fragment_length: 'auto' needs a train batch of at least one step per env (16)"),
])
def test_validate_names_the_key_and_what_was_expected(changes, message):
    config = PPOConfig.from_dict(changes)  # setting never validates: build() does, later
    with pytest.raises(ConfigError) as err:
        config.validate()
    assert message in str(err.value)
    assert str(err.value).count("\n") == 1  # one problem, on its own line


def test_a_lambda_env_is_plain_data_as_a_token():
    config = PPOConfig.from_dict({"env": lambda cfg: None})
    config.validate()
    assert config.to_dict()["env"].startswith("<local ")


def test_validate_reports_every_bad_field_at_once():
    config = PPOConfig.from_dict({"lr": -1, "gamma": 2, "num_env_runners": -3})
    with pytest.raises(ConfigError) as err:
        config.validate()
    assert all(k in str(err.value) for k in ("lr:", "gamma:", "num_env_runners:"))


def test_defaults_validate_and_valid_edge_values_pass():
    AlgorithmConfig().validate()
    PPOConfig().validate()
    PPOConfig.from_dict({"gamma": 1.0, "lr": 0, "num_env_runners": 0, "lambda": 0,
                         "use_gae": False, "batch_mode": "complete_episodes",
                         "lr_schedule": [[0, 1e-3], [1000, 0.0]], "grad_clip": 40,
                         "minibatch_size": 2048}).validate()


# --- dicts and copies ---

def test_to_dict_from_dict_round_trip_through_json():
    config = (PPOConfig().environment("CartPole-v1", env_config={"render_mode": None})
              .training(lr_schedule=[[0, 1e-3], [10_000, 1e-4]], **{"lambda": 0.95})
              .callbacks(MyCallbacks).debugging(seed=3))
    data = json.loads(json.dumps(config.to_dict()))
    assert data["callbacks_class"] == f"{__name__}:MyCallbacks"
    assert data["framework"] == "torch"
    restored = PPOConfig.from_dict(data)
    assert restored.callbacks_class == f"{__name__}:MyCallbacks"
    restored.callbacks_class = MyCallbacks
    assert restored == config


def test_defaults_round_trip_and_match_the_dataclass_defaults():
    assert PPOConfig.from_dict(PPOConfig().to_dict()) == PPOConfig()
    assert AlgorithmConfig.from_dict(AlgorithmConfig().to_dict()) == AlgorithmConfig()
    assert {r.name: r.default for r in PPOConfig.fields_table()} == dataclasses.asdict(PPOConfig())


def test_update_from_dict_sets_keys_of_any_group():
    config = PPOConfig().update_from_dict({"env": "Pendulum-v1", "num_workers": 3, "lr": 1e-4})
    assert (config.env, config.num_env_runners, config.lr) == ("Pendulum-v1", 3, 1e-4)


def test_copy_is_independent():
    original = PPOConfig().environment("CartPole-v1", env_config={"a": [1]})
    clone = original.copy()
    clone.model["fcnet_hiddens"].append(32)
    clone.env_config["a"].append(2)
    clone.training(model={"fcnet_activation": "relu"}, lr=1.0)
    assert original.model["fcnet_hiddens"] == [64, 64]
    assert original.model["fcnet_activation"] == "tanh"
    assert original.env_config == {"a": [1]} and original.lr == 6e-4


def test_instances_do_not_share_mutable_defaults():
    a, b = PPOConfig(), PPOConfig()
    a.model["fcnet_hiddens"].append(8)
    a.env_config["x"] = 1
    assert b.model["fcnet_hiddens"] == [64, 64] and b.env_config == {}
    assert ImpalaConfig().model["vf_share_layers"] is True  # IMPALA's override stays IMPALA's
    assert AlgorithmConfig().model == MODEL_DEFAULTS and AlgorithmConfig().model is not MODEL_DEFAULTS


# --- defaults ---

def test_ppo_defaults_are_the_measured_ones():
    c = PPOConfig()
    assert (c.lr, c.train_batch_size, c.minibatch_size, c.num_epochs) == (6e-4, 2048, 128, 10)
    assert (c.lambda_, c.clip_param, c.vf_clip_param, c.vf_loss_coeff) == (0.95, 0.2, None, 0.5)
    assert (c.kl_coeff, c.kl_target, c.entropy_coeff, c.grad_clip) == (0.2, 0.01, 0.0, 0.5)
    assert not c.use_kl_loss and c.use_critic and c.use_gae and c.shuffle_batch_per_epoch
    assert (c.rollout_fragment_length, c.num_env_runners, c.gamma) == ("auto", 2, 0.99)
    assert c.model["vf_share_layers"] is False and c.model["fcnet_hiddens"] == [64, 64]
    # Other algorithms keep the shared model default.
    assert AlgorithmConfig().model["fcnet_hiddens"] == [256, 256]


def test_rllib_defaults_give_rllibs_ppo_values():
    c = PPOConfig.rllib_defaults()
    assert (c.lr, c.train_batch_size, c.minibatch_size, c.num_epochs) == (5e-5, 4000, 128, 30)
    assert (c.lambda_, c.clip_param, c.vf_clip_param, c.vf_loss_coeff) == (1.0, 0.3, 10.0, 1.0)
    assert c.use_kl_loss and c.grad_clip is None and c.model["fcnet_hiddens"] == [256, 256]
    assert c.model["fcnet_activation"] == "tanh"  # the rest of the model dict is untouched


def test_subclass_default_for_unknown_setting_is_an_error():
    with pytest.raises(TypeError, match="lrr"):
        class Bad(AlgorithmConfig, defaults={"lrr": 1.0}):
            pass


# --- schedules ---

SCHEDULE = [[100, 1.0], [200, 0.0], [400, 0.5]]


@pytest.mark.parametrize("t, expected", [
    (0, 1.0), (100, 1.0),  # before and at the first point
    (150, 0.5), (200, 0.0), (300, 0.25),  # between points
    (400, 0.5), (10**9, 0.5),  # at and after the last point
])
def test_value_at_is_piecewise_linear_and_clamped(t, expected):
    assert value_at(SCHEDULE, t) == pytest.approx(expected)


def test_value_at_with_a_step_and_a_single_point():
    step = [[0, 1.0], [10, 1.0], [10, 3.0]]
    assert (value_at(step, 5), value_at(step, 10), value_at(step, 11)) == (1.0, 3.0, 3.0)
    assert value_at([[0, 0.1]], 50) == 0.1


@pytest.mark.parametrize("bad", [[], None, [[0]], [[-1, 1.0]], [[5, 1.0], [2, 1.0]],
                                 [[0.5, 1.0]], [[True, 1.0]]])
def test_validate_schedule_rejects(bad):
    with pytest.raises(ValueError):
        validate_schedule(bad)


def test_lr_at_uses_the_schedule_when_set():
    assert PPOConfig().lr_at(10**6) == 6e-4
    config = PPOConfig().training(lr_schedule=[[0, 1e-3], [1000, 0.0]])
    assert config.lr_at(500) == pytest.approx(5e-4)


# --- rollout_fragment_length="auto" ---

@pytest.mark.parametrize("runners, envs, batch, expected", [
    (2, 1, 4000, 2000),
    (0, 1, 4000, 4000),  # 0 runners: the driver samples alone
    (4, 8, 4096, 128),
])
def test_auto_fragment_length_splits_the_batch_evenly(runners, envs, batch, expected):
    config = PPOConfig().env_runners(num_env_runners=runners, num_envs_per_env_runner=envs)
    config.training(train_batch_size=batch)
    assert [config.get_rollout_fragment_length(i) for i in range(max(1, runners) + 1)] == \
        [expected] * (max(1, runners) + 1)


def test_auto_fragment_length_rounds_up_on_the_first_runners():
    # 2500 steps over 4 runners x 3 envs: 208 each leaves 4 steps; as in RLlib, the first
    # runners step once more per env until a round of fragments covers the batch.
    config = PPOConfig().env_runners(num_env_runners=4, num_envs_per_env_runner=3)
    config.training(train_batch_size=2500)
    lengths = [config.get_rollout_fragment_length(i) for i in range(1, 5)]
    assert lengths == [209, 209, 208, 208]
    assert 2500 <= sum(lengths) * 3 < 2500 + 4 * 3


def test_auto_fragment_length_uses_the_per_learner_batch_when_set():
    config = PPOConfig().learners(num_learners=2).training(train_batch_size_per_learner=500)
    assert config.total_train_batch_size == 1000
    assert config.get_rollout_fragment_length(1) == 500  # 2 runners (PPO default), 1 env


def test_explicit_fragment_length_is_returned_as_is():
    assert PPOConfig().env_runners(rollout_fragment_length=64).get_rollout_fragment_length(3) == 64


def test_policy_server_settings_are_checked_together():
    import gymnasium as gym

    base = PPOConfig().env_runners(policy_server_address="tcp://127.0.0.1:9900")
    with pytest.raises(ConfigError, match="observation_space: policy_server_address without an env"):
        base.validate()
    box = gym.spaces.Box(-1.0, 1.0, (3,))
    ok = base.environment(observation_space=box, action_space=gym.spaces.Discrete(2))
    ok.validate()
    data = ok.to_dict()
    assert data["observation_space"]["type"] == "Box" and data["observation_space"]["low"] == [-1.0] * 3
    assert PPOConfig.from_dict(data).to_dict() == data  # plain data both ways (params.json)
    with pytest.raises(ConfigError, match="must exceed policy_server_idle_timeout_s"):
        ok.env_runners(sample_timeout_s=5.0, policy_server_idle_timeout_s=10.0).validate()
    ok.env_runners(sample_timeout_s=60.0, policy_server_idle_timeout_s=10.0)
    with pytest.raises(ConfigError, match="policy_server_spin_wait_us"):
        ok.env_runners(policy_server_spin_wait_us=-1).validate()
    ok.env_runners(policy_server_spin_wait_us=0).validate()  # never spins
    with pytest.raises(ConfigError, match="action_space: not a gymnasium space"):
        ok.environment(action_space="Discrete(2)").validate()
