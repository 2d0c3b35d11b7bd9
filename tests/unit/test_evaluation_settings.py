"""The evaluation settings, the evaluation summary, the callback hook check, stop keys under
evaluation/ and the log tail: without processes."""

from __future__ import annotations

import logging
import math

import pytest

from rlmesh.algorithms import ConfigError, PPOConfig
from rlmesh.driver.evaluation_group import split, summarize
from rlmesh.callbacks import HOOKS, Callbacks, check_hooks
from rlmesh.tune.train_loop import Stopper, UsageError, check_evaluation_stop
from rlmesh.runtime.logtail import LogTail, RoleFilter


def test_evaluation_builder_sets_rllib_names_and_old_aliases():
    config = PPOConfig().environment("CartPole-v1").evaluation(
        evaluation_interval=3, evaluation_num_workers=2, evaluation_duration=5,
        evaluation_duration_unit="timesteps", evaluation_config={"explore": True},
        evaluation_parallel_to_training=True, evaluation_sample_timeout_s=9.0, record_env=True)
    config.validate()
    assert config["evaluation_num_env_runners"] == 2
    assert config.to_dict()["evaluation_config"] == {"explore": True}
    assert {s.key for s in PPOConfig.fields_table("evaluation")} >= {
        "evaluation_interval", "evaluation_duration", "evaluation_duration_unit",
        "evaluation_num_env_runners", "evaluation_config", "evaluation_parallel_to_training",
        "evaluation_sample_timeout_s", "render_env", "record_env"}


def test_evaluation_config_turns_explore_off_unless_it_says_otherwise():
    config = PPOConfig().evaluation(evaluation_config={"lr": 0.5})
    assert config.explore is True
    assert config.get_evaluation_config_object().explore is False
    assert config.get_evaluation_config_object().lr == 0.5
    on = PPOConfig().evaluation(evaluation_config={"explore": True})
    assert on.get_evaluation_config_object().explore is True


def test_bad_evaluation_settings_are_named():
    with pytest.raises(ConfigError, match="evaluation_config: unknown config key 'num_workerz'"):
        PPOConfig().evaluation(evaluation_config={"num_workerz": 1}).validate()
    with pytest.raises(ConfigError, match="evaluation_config: explore: expected bool, got 'no'"):
        PPOConfig().evaluation(evaluation_config={"explore": "no"}).validate()
    with pytest.raises(ConfigError, match="evaluation_duration_unit: expected 'episodes' or"):
        PPOConfig().evaluation(evaluation_duration_unit="steps").validate()
    with pytest.raises(ConfigError, match="evaluation_interval: expected >= 1"):
        PPOConfig().evaluation(evaluation_interval=0).validate()
    with pytest.raises(ConfigError, match="evaluation_interval: evaluation steps envs"):
        PPOConfig().evaluation(evaluation_interval=1).validate()  # no env


def test_split_gives_every_runner_its_share():
    assert split(10, 3) == [4, 3, 3]
    assert split(1, 2) == [1, 0]
    assert sum(split(7, 4)) == 7


def test_summary_keeps_partial_episodes_apart():
    got = [{"episodes": [{"return": 10.0, "length": 10}], "env_steps": 60, "timed_out": False,
            "partial_episodes": [{"return": 50.0, "length": 50}], "videos": ["a.mp4"]},
           {"episodes": [{"return": 20.0, "length": 20, "custom_metrics": {"x": 1.0}}],
            "env_steps": 20, "timed_out": True, "partial_episodes": [], "videos": []}]
    ev = summarize(got, iteration=4, elapsed=1.0)
    assert ev["episode_reward_mean"] == 15.0 and ev["episodes_this_iter"] == 2
    assert ev["num_partial_episodes"] == 1 and ev["partial_episode_reward_mean"] == 50.0
    assert ev["num_env_steps_sampled_this_iter"] == 80 and ev["timed_out"] is True
    assert ev["custom_metrics"] == {"x_mean": 1.0, "x_min": 1.0, "x_max": 1.0}
    assert ev["videos"] == ["a.mp4"] and ev["training_iteration"] == 4
    empty = summarize([], 1, 0.0)
    assert math.isnan(empty["episode_reward_mean"]) and empty["num_partial_episodes"] == 0


def test_hooks_are_rllibs_set():
    assert set(HOOKS) == {
        "on_algorithm_init", "on_environment_created", "on_episode_created", "on_episode_start",
        "on_episode_step", "on_episode_end", "on_sample_end", "on_postprocess_trajectory",
        "on_learn_on_batch", "on_train_result", "on_evaluate_start", "on_evaluate_end",
        "on_checkpoint_loaded"}


def test_a_method_that_is_not_a_hook_names_the_closest():
    class Typo(Callbacks):
        def on_sample_ended(self, **kw):
            pass

    class NoPrefix(Callbacks):
        def train_result(self, **kw):
            pass

    class Fine(Callbacks):
        def on_episode_end(self, **kw):
            self.helper()

        def helper(self):
            pass

    with pytest.raises(ConfigError, match="Typo.on_sample_ended .*'on_sample_end'"):
        check_hooks(Typo)
    with pytest.raises(ConfigError, match="'on_train_result'"):
        check_hooks(NoPrefix)
    check_hooks(Fine)


def test_stop_keys_under_evaluation_wait_for_the_first_evaluation():
    stopper = Stopper({"evaluation/episode_reward_mean": 100, "training_iteration": 10})
    warnings = []
    assert stopper.met({"training_iteration": 1, "episode_reward_mean": 5.0},
                       warn=warnings.append) is None
    assert warnings == []  # evaluation results are expected later: no warning
    why = stopper.met({"training_iteration": 2,
                       "evaluation": {"episode_reward_mean": 120.0}})
    assert why == "evaluation/episode_reward_mean = 120 >= 100"


def test_misspelled_stop_key_under_evaluation_fails_when_evaluation_comes():
    stopper = Stopper({"evaluation/episode_reward_maen": 100})
    stopper.met({"training_iteration": 1})
    with pytest.raises(UsageError, match="did you mean 'evaluation/episode_reward_mean'"):
        stopper.met({"training_iteration": 2, "evaluation": {"episode_reward_mean": 1.0,
                                                             "episode_reward_max": 1.0}})


def test_evaluation_stop_key_needs_evaluation():
    check_evaluation_stop({"evaluation/episode_reward_mean": 1},
                          PPOConfig().evaluation(evaluation_interval=2))
    with pytest.raises(UsageError, match="set evaluation_interval"):
        check_evaluation_stop({"evaluation/episode_reward_mean": 1}, PPOConfig())


def test_log_tail_reemits_child_records_with_their_role(tmp_path, caplog):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "env_runner-1.log").write_text(
        "2026-01-01 10:00:00,001 DEBUG [env_runner-1] rlmesh.roles.env_runner: fragment 1\n"
        "2026-01-01 10:00:00,002 ERROR [env_runner-1] rlmesh.roles.env_sampler: boom\n"
        "Traceback (most recent call last):\n"
        "2026-01-01 10:00:00,003 INFO [env_runner-1] rlmesh.x: half a li")
    tail = LogTail(logs, "INFO")
    with caplog.at_level(logging.DEBUG):
        tail.poll()
    got = [(r.levelname, r.role, r.name, r.getMessage()) for r in caplog.records]
    assert got == [("ERROR", "env_runner-1", "rlmesh.roles.env_sampler", "boom"),
                   ("ERROR", "env_runner-1", "rlmesh.output", "Traceback (most recent call last):")]
    caplog.clear()
    with open(logs / "env_runner-1.log", "a") as f:
        f.write("ne\n")  # the rest of the line written earlier
    with caplog.at_level(logging.DEBUG):
        tail.poll()
    assert [r.getMessage() for r in caplog.records] == ["half a line"]


def test_role_filter_marks_this_process_records():
    record = logging.makeLogRecord({"msg": "x"})
    RoleFilter().filter(record)
    assert record.role == "driver"


def test_evaluation_runners_are_in_the_placement_request():
    config = PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=2).evaluation(
        evaluation_interval=1, evaluation_num_env_runners=2)
    groups = {g.name: [b.label for b in g.bundles] for g in config.resource_request()}
    assert groups["evaluation_runners"] == ["eval_runner-1", "eval_runner-2"]
    assert "evaluation_runners" not in {g.name for g in PPOConfig().resource_request()}
