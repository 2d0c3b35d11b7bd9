"""Seed 002 (RLlib's IMPALA trainer source): every key of its DEFAULT_CONFIG loads at the
seed's value, the ones rlmesh has are honoured (RMSProp and its settings, V-trace's clips and
last-step switch, the pipeline's queue and in-flight limits), and ``ImpalaTrainer(config=
DEFAULT_CONFIG-with-changes, env=...)`` trains an iteration on CartPole."""

from __future__ import annotations

import logging
import os

import pytest
import torch

from rlmesh.agents.impala.impala import DEFAULT_CONFIG, ImpalaTrainer
from rlmesh.algorithms.impala_config import ImpalaConfig
from rlmesh.config import rllib
from rlmesh.config.base import ConfigError

# The IMPALA config keys of the seed, each with the value it gives it; -1 is RLlib's
# DEPRECATED_VALUE (num_data_loader_buffers).
SEED_VALUES = [
    ("vtrace", True), ("vtrace_clip_rho_threshold", 1.0), ("vtrace_clip_pg_rho_threshold", 1.0),
    ("vtrace_drop_last_ts", True), ("rollout_fragment_length", 50), ("train_batch_size", 500),
    ("min_time_s_per_reporting", 10), ("num_workers", 2), ("num_gpus", 1),
    ("num_multi_gpu_tower_stacks", 1), ("minibatch_buffer_size", 1), ("num_sgd_iter", 1),
    ("replay_proportion", 0.0), ("replay_buffer_num_slots", 0), ("learner_queue_size", 16),
    ("learner_queue_timeout", 300), ("max_sample_requests_in_flight_per_worker", 2),
    ("broadcast_interval", 1), ("num_aggregation_workers", 0), ("grad_clip", 40.0),
    ("opt_type", "adam"), ("lr", 0.0005), ("lr_schedule", None), ("decay", 0.99),
    ("momentum", 0.0), ("epsilon", 0.1), ("vf_loss_coeff", 0.5), ("entropy_coeff", 0.01),
    ("entropy_coeff_schedule", None), ("_separate_vf_optimizer", False), ("_lr_vf", 0.0005),
    ("after_train_step", None), ("num_data_loader_buffers", -1),
]

# Keys of the seed that are rlmesh settings under another name: (key, value, setting, value).
RENAMED = [("num_workers", 3, "num_env_runners", 3), ("num_sgd_iter", 2, "num_epochs", 2),
           ("min_time_s_per_reporting", 1, "min_time_s_per_iteration", 1),
           ("num_gpus", 2, "num_learners", 2), ("_separate_vf_optimizer", True,
                                                "separate_vf_optimizer", True),
           ("_lr_vf", 1e-3, "lr_vf", 1e-3)]


def test_every_key_loads_at_the_seeds_value_and_the_idle_ones_are_said_once(caplog, monkeypatch):
    monkeypatch.setattr(rllib, "_SAID", set())
    caplog.set_level(logging.WARNING, logger="rlmesh.config")
    for _ in range(2):
        config = ImpalaConfig.from_dict(dict(SEED_VALUES))
    assert (config.vtrace_drop_last_ts, config.learner_queue_size, config.num_env_runners,
            config.min_time_s_per_iteration, config.num_gpus_per_learner) == (True, 16, 2, 10, 1)
    (line,) = [r.getMessage() for r in caplog.records]
    assert "num_multi_gpu_tower_stacks" in line and "num_data_loader_buffers" in line


@pytest.mark.parametrize("key, value, setting, expected", RENAMED, ids=[r[0] for r in RENAMED])
def test_the_seeds_names_set_todays_settings(key, value, setting, expected):
    assert getattr(ImpalaConfig.from_dict({key: value}), setting) == expected


def test_the_defaults_differ_from_the_seeds_only_where_documented():
    # num_gpus: 0 (the seed's 1 refuses on a machine without CUDA, as RLlib's did; set it on
    # a GPU machine); vtrace_drop_last_ts: False, as RLlib's later defaults.
    assert DEFAULT_CONFIG["num_gpus"] == 0 and DEFAULT_CONFIG["vtrace_drop_last_ts"] is False
    seed = dict(SEED_VALUES)
    same = [k for k in ("vtrace", "rollout_fragment_length", "train_batch_size", "num_workers",
                        "learner_queue_size", "grad_clip", "opt_type", "lr", "decay", "epsilon",
                        "vf_loss_coeff", "entropy_coeff", "min_time_s_per_reporting")
            if DEFAULT_CONFIG[k] != seed[k]]
    assert same == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible here")
def test_num_gpus_1_refuses_in_one_line_on_a_cpu_machine():
    with pytest.raises(ConfigError, match=r"no CUDA device is visible.*_fake_gpus") as e:
        ImpalaTrainer(config={**DEFAULT_CONFIG, "num_gpus": 1}, env="CartPole-v0")
    assert "\n" not in str(e.value)


def record_update(policy, stats) -> None:
    """after_train_step as rlmesh calls it: in the learner process, after each update."""
    with open(os.environ["SEED_002_UPDATES"], "a") as f:
        f.write(f"{policy.num_updates}\n")


def rllib_after_train_step(workers, config):
    """RLlib's form: a factory of the function applied to the learner's fetches."""
    return lambda fetches: None


def _small(**changes) -> dict:
    config = DEFAULT_CONFIG.copy()
    config.update(num_workers=1, rollout_fragment_length=20, train_batch_size=40,
                  min_time_s_per_reporting=0, **changes)
    return config


def test_impala_trainer_trains_an_iteration_with_rmsprop_and_the_vtrace_keys(tmp_path, monkeypatch):
    monkeypatch.setenv("SEED_002_UPDATES", str(tmp_path / "updates"))  # the learner inherits it
    config = _small(opt_type="rmsprop", decay=0.9, momentum=0.1, epsilon=0.05,
                    vtrace_clip_rho_threshold=0.8, vtrace_clip_pg_rho_threshold=0.9,
                    vtrace_drop_last_ts=True, learner_queue_size=4,
                    max_sample_requests_in_flight_per_worker=1, after_train_step=record_update)
    trainer = ImpalaTrainer(config=config, env="CartPole-v0")
    try:
        result = trainer.train()
        assert result["timesteps_total"] >= 40 and result["num_env_steps_trained"] > 0
        state = trainer.learner_group.get_state()["policies"]["default_policy"]
        (group,) = state["optimizer"]["param_groups"]
        assert (group["alpha"], group["eps"], group["momentum"]) == (0.9, 0.05, 0.1)
        assert "square_avg" in state["optimizer"]["state"][0]  # RMSProp's, not Adam's
        cfg = trainer.config  # what the learner process was given
        assert (cfg.vtrace_clip_rho_threshold, cfg.vtrace_clip_pg_rho_threshold,
                cfg.vtrace_drop_last_ts, cfg.learner_queue_size) == (0.8, 0.9, True, 4)
        calls = (tmp_path / "updates").read_text().split()
        assert calls and calls == [str(n) for n in range(1, len(calls) + 1)]  # once per update
    finally:
        trainer.stop()


def test_rllibs_after_train_step_factory_is_refused_in_one_line():
    trainer = ImpalaTrainer(config=_small(after_train_step=rllib_after_train_step),
                            env="CartPole-v0")
    try:
        with pytest.raises(Exception, match="after_train_step returned a function") as e:
            trainer.train()
        assert "after_train_step(policy, stats)" in str(e.value).splitlines()[0]
    finally:
        trainer.stop()
