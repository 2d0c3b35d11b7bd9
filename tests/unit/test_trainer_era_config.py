"""RLlib's Trainer-era surface without processes: rlmesh.agents' DEFAULT_CONFIGs and names,
the config keys of RLlib's Trainer era (each loads; at its default said once; else honoured
or one line), the Trainer(config=, env=) adapter, rlmesh.init, pretty_print, rollout's
checkpoint spellings and --run check, and @rlmesh.remote's refusals."""

from __future__ import annotations

import logging
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

import rlmesh
from rlmesh.agents import _exports
from rlmesh.algorithms.ppo_config import PPOConfig
from rlmesh.cli.rollout import check_run, resolve_checkpoint
from rlmesh.config import rllib
from rlmesh.config.base import ConfigError
from rlmesh.driver.algorithm_registry import get_algorithm_class, get_config_class
from rlmesh.driver.trainer_args import trainer_config
from rlmesh.tune.logger import pretty_print


@pytest.fixture
def said(caplog, monkeypatch):
    """The config notes said (fresh: notes are said once per process)."""
    monkeypatch.setattr(rllib, "_SAID", set())
    caplog.set_level(logging.WARNING, logger="rlmesh.config")
    return lambda: [r.getMessage() for r in caplog.records if r.name == "rlmesh.config"]


def test_trainer_era_keys_at_their_defaults_load_and_say_so_once(said):
    era = {"use_eager": False, "no_eager_on_workers": False, "memory": 0,
           "object_store_memory": 0, "memory_per_worker": 0, "object_store_memory_per_worker": 0}
    for _ in range(2):  # a script builds its config more than once: one line all the same
        PPOConfig.from_dict(dict(era))
    (line,) = said()
    assert all(key in line for key in era) and line.startswith("no effect in rlmesh:")
    assert "TensorFlow" in line and "schedules CPUs and GPUs only" in line


def test_monitor_false_is_said_and_true_records_evaluation_episodes(said):
    assert PPOConfig.from_dict({"monitor": False}).record_env is False
    assert "monitor=false" in said()[0]
    on = PPOConfig.from_dict({"monitor": True})
    assert (on.record_env, on.evaluation_interval, on.evaluation_duration) == (True, 1, 1)
    assert "record_env: true" in said()[1]
    mine = PPOConfig.from_dict({"monitor": True, "evaluation_interval": 5})
    assert (mine.record_env, mine.evaluation_interval) == (True, 5)
    longer = PPOConfig.from_dict({"monitor": True, "evaluation_num_episodes": 3})
    assert (longer.evaluation_interval, longer.evaluation_duration) == (1, 3)


def test_sample_batch_size_is_rollout_fragment_length():
    config = PPOConfig.from_dict({"sample_batch_size": 50})
    assert config.rollout_fragment_length == 50
    assert config.train_batch_size == PPOConfig().train_batch_size


def test_memory_at_another_value_still_loads_and_says_it_has_no_effect(said):
    assert PPOConfig.from_dict({"memory": 2 ** 30, "use_eager": True}).to_dict()
    assert "memory (Ray's memory reservation" in said()[0]


@pytest.mark.parametrize("run", sorted(_exports.TRAINERS))
def test_default_config_loads_back_as_rllibs_defaults_without_a_word(run, said):
    cls = get_config_class(run)
    config = _exports.default_config(run).copy()
    assert "num_workers" in config and "num_env_runners" not in config  # the era's names
    loaded = trainer_config(cls, config)
    assert loaded.to_dict() == cls.rllib_defaults("old").to_dict()
    assert said() == []


def test_every_module_names_its_trainers_and_configs():
    import importlib

    for module, runs in _exports.MODULES.items():
        mod = importlib.import_module(f"rlmesh.agents.{module}")
        for run in runs:
            assert getattr(mod, _exports.TRAINERS[run]) is get_algorithm_class(run)
            assert get_config_class(run).algorithm_path in mod.__doc__
        assert mod.DEFAULT_CONFIG is _exports.default_config(runs[0])  # one per algorithm
    from rlmesh.agents import dqn, ddpg, marwil, ppo

    simple_q = get_config_class("SimpleQ").rllib_defaults()
    assert dqn.SIMPLE_Q_DEFAULT_CONFIG["num_workers"] == simple_q.num_env_runners
    assert ddpg.TD3_DEFAULT_CONFIG is _exports.default_config("TD3")
    assert marwil.BC_DEFAULT_CONFIG is _exports.default_config("BC")
    with pytest.raises(AttributeError, match="PPOTrainer"):
        ppo.PPOTrainr  # noqa: B018  (a typo names what there is)


def test_reading_a_default_config_does_not_import_torch():
    code = ("import sys, rlmesh.agents.ppo as ppo; c = ppo.DEFAULT_CONFIG.copy(); "
            "from rlmesh.agents.trainer import with_common_config; with_common_config({}); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_with_common_config_merges_nested_dicts():
    from rlmesh.agents.trainer import COMMON_CONFIG, Trainer, with_common_config
    from rlmesh.driver.algorithm import Algorithm

    merged = with_common_config({"vtrace": True, "model": {"fcnet_hiddens": [8]}})
    assert merged["vtrace"] is True and merged["model"]["fcnet_hiddens"] == [8]
    assert merged["model"]["fcnet_activation"] == COMMON_CONFIG["model"]["fcnet_activation"]
    assert "vtrace" not in COMMON_CONFIG and COMMON_CONFIG["model"]["fcnet_hiddens"] != [8]
    assert Trainer is Algorithm


class _PhaseEnv(gym.Env):
    """A gymnasium.Env class built with its env_config, as RLlib's env classes are."""

    def __init__(self, env_config):
        self.observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)


def test_the_trainer_constructor_takes_an_env_name_or_class_and_a_dict():
    config = trainer_config(get_config_class("PPO"), {"num_workers": 0, "lr": 1e-3},
                            env="CartPole-v0")
    assert (config.env, config.num_env_runners, config.lr) == ("CartPole-v0", 0, 1e-3)
    assert config.train_batch_size == 4000  # RLlib's PPO default, as the Trainer era meant it
    assert trainer_config(get_config_class("PPO"), None, env=_PhaseEnv).env is _PhaseEnv
    today = PPOConfig().environment("CartPole-v1")
    assert trainer_config(PPOConfig, today) is today
    assert trainer_config(PPOConfig, today, env="Acrobot-v1").env == "Acrobot-v1"
    assert today.env == "CartPole-v1"  # the caller's object is left alone


def test_the_trainer_constructor_refuses_in_one_line():
    with pytest.raises(ConfigError, match="logger_creator: .*ResultLogger"):
        trainer_config(PPOConfig, {}, logger_creator=lambda config: None)
    with pytest.raises(ConfigError, match="expected a dict of config keys or a PPOConfig"):
        trainer_config(PPOConfig, ["lr", 1e-3])


def test_init_and_shutdown_do_nothing_and_say_so_once(caplog, monkeypatch):
    from rlmesh import ray_compat

    monkeypatch.setattr(ray_compat, "_said", set())
    caplog.set_level(logging.WARNING, logger="rlmesh")
    rlmesh.init(num_cpus=2, ignore_reinit_error=True)
    rlmesh.init()
    assert rlmesh.is_initialized()
    rlmesh.shutdown()
    rlmesh.shutdown()
    lines = [r.getMessage() for r in caplog.records if r.name == "rlmesh"]
    assert len(lines) == 2 and "needs no cluster runtime" in lines[0]
    assert "num_cpus" in lines[0] and "nothing to shut down" in lines[1]
    with pytest.raises(TypeError, match="unexpected keyword argument 'num_cpu'"):
        rlmesh.init(num_cpu=2)


def test_pretty_print_is_rllibs_readable_dump():
    text = pretty_print({"episode_reward_mean": np.float32(21.5), "config": {"lr": 1},
                         "hist_stats": {"episode_reward": [1.0]}, "unset": None,
                         "info": {"learner": {"default_policy": {"kl": np.float64(0.01)}}}})
    assert text.splitlines() == ["episode_reward_mean: 21.5", "info:", "  learner:",
                                 "    default_policy:", "      kl: 0.01"]


def test_rollout_takes_rllibs_checkpoint_spellings(tmp_path):
    ckpt = tmp_path / "trial" / "checkpoint_000001"
    ckpt.mkdir(parents=True)
    (ckpt / "rlmesh_checkpoint.msgpack").write_bytes(b"")
    for spelling in ("checkpoint_000001", "checkpoint_1", "checkpoint_1/checkpoint-1",
                     "checkpoint_000001/checkpoint-1",
                     "checkpoint_000001/rlmesh_checkpoint.msgpack"):
        assert resolve_checkpoint(str(tmp_path / "trial" / spelling)) == ckpt, spelling
    assert resolve_checkpoint(str(tmp_path / "trial")) == ckpt
    with pytest.raises(FileNotFoundError):
        resolve_checkpoint(str(tmp_path / "trial" / "checkpoint_2" / "checkpoint-2"))


def test_rollout_run_must_agree_with_the_checkpoint(tmp_path):
    import msgpack

    (tmp_path / "rlmesh_checkpoint.msgpack").write_bytes(msgpack.packb({"algorithm": "DQN"}))
    assert check_run(None, tmp_path) is None and check_run("dqn", tmp_path) is None
    assert check_run("PPO", tmp_path) == (f"--run PPO, but {tmp_path} is a DQN checkpoint; give "
                                          "--run DQN, or leave --run out (the checkpoint names "
                                          "its algorithm)")
    assert "did you mean 'DQN'" in check_run("DQNN", tmp_path)


def test_ray_remote_forms_are_refused_in_one_line():
    @rlmesh.remote
    class Counter:
        def inc(self, n):
            return n

    with pytest.raises(TypeError, match=r"Counter.remote\(\): too many positional"):
        Counter.remote(1)  # checked against the constructor before any process starts
    with pytest.raises(TypeError, match="no remote tasks"):
        rlmesh.remote(lambda: 1)
    from rlmesh.experimental import named_actors
    from rlmesh.named_actors import parse_named_actors

    with pytest.raises(TypeError, match=r"config.callbacks\(named_actors="):
        named_actors.register_actor("global_counter", Counter)
    (spec,) = parse_named_actors({"global_counter": Counter})  # the wrapped class is taken
    assert "test_ray_remote_forms_are_refused_in_one_line.<locals>.Counter" in spec.cls
    with pytest.raises(TypeError, match="what a named actor's method.remote"):
        rlmesh.get(42)
