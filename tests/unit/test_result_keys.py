"""Result keys of both RLlib API stacks: a result carries the new stack's env_runners group,
the old stack's spellings are resolved at lookup, and stop keys, a sweep's metric and
TensorBoard treat them alike (each value plotted once)."""

from __future__ import annotations

import pytest

from rlmesh.tune.train_loop import Stopper, UsageError
from rlmesh.results import (ResultLogger, flatten, is_new_stack_duplicate, lookup,
                            new_stack_group, result_key)
from rlmesh.tune.trial import Trial
from tests.unit.test_results import tb_scalars


def result(iteration: int, reward: float, evaluation: dict | None = None) -> dict:
    """A result shaped like Algorithm.train()'s (episode statistics, counters, learner)."""
    out = {"training_iteration": iteration, "timesteps_total": 1000 * iteration,
           "num_env_steps_sampled": 1000 * iteration, "num_env_steps_trained": 1000 * iteration,
           "num_env_steps_sampled_lifetime": 1000 * iteration, "time_total_s": 2.0 * iteration,
           "episode_reward_mean": reward, "episode_reward_min": reward - 5,
           "episode_reward_max": reward + 5, "episode_len_mean": reward,
           "episodes_this_iter": 4, "episodes_total": 4 * iteration,
           "info": {"learner": {"default_policy": {"policy_loss": 0.1}}}}
    out.update(new_stack_group(out))
    if evaluation is not None:
        out["evaluation"] = {**evaluation, **new_stack_group(evaluation)}
    return out


@pytest.mark.parametrize("key, ours", [
    ("env_runners/episode_return_mean", "episode_reward_mean"),
    ("env_runners/episode_return_min", "episode_reward_min"),
    ("env_runners/episode_return_max", "episode_reward_max"),
    ("env_runners/episode_len_mean", "episode_len_mean"),
    ("env_runners/num_env_steps_sampled_lifetime", "timesteps_total"),
    ("num_env_steps_sampled_lifetime", "timesteps_total"),
    ("evaluation/env_runners/episode_return_mean", "evaluation/episode_reward_mean"),
    ("sampler_results/episode_reward_mean", "episode_reward_mean"),
    ("env_runners/episode_reward_mean", "episode_reward_mean"),  # old stack, RLlib 2.10+
    ("episode_reward_mean", "episode_reward_mean"),
    ("evaluation/episode_reward_mean", "evaluation/episode_reward_mean"),
    ("evaluation/sampler_results/episode_reward_mean", "evaluation/episode_reward_mean"),
    ("timesteps_total", "timesteps_total"),
    ("training_iteration", "training_iteration"),
    ("time_total_s", "time_total_s"),
    ("info/num_env_steps_sampled", "num_env_steps_sampled"),
    ("info/learner/default_policy/policy_loss", "info/learner/default_policy/policy_loss"),
])
def test_each_stacks_key_names_one_value_of_the_result(key, ours):
    assert result_key(key) == ours
    flat = flatten(result(3, 42.0, {"episode_reward_mean": 77.0, "episodes_this_iter": 2}))
    assert lookup(flat, key) == flat[ours] is not None


def test_the_result_itself_carries_the_new_stacks_group():
    r = result(2, 30.0, {"episode_reward_mean": 50.0, "episode_len_mean": 50.0,
                         "episodes_this_iter": 3})
    assert r["env_runners"]["episode_return_mean"] == 30.0
    assert r["env_runners"]["num_env_steps_sampled_lifetime"] == 2000
    assert r["env_runners"]["num_episodes"] == 4
    assert r["evaluation"]["env_runners"] == {"episode_return_mean": 50.0,
                                              "episode_len_mean": 50.0, "num_episodes": 3}


@pytest.mark.parametrize("key", ["env_runners/episode_return_mean",
                                 "sampler_results/episode_reward_mean", "episode_reward_mean"])
def test_a_stop_key_of_either_stack_stops_at_its_threshold(key):
    stopper = Stopper({key: 30})
    warned = []
    assert stopper.met(result(1, 20.0), warn=warned.append) is None
    assert stopper.met(result(2, 31.0), warn=warned.append) == f"{key} = 31 >= 30"
    assert warned == []


def test_old_stack_spellings_stop_a_result_without_the_new_group():
    """A function trainable's own result: only rlmesh's (the old stack's) keys."""
    plain = {"training_iteration": 1, "episode_reward_mean": 35.0, "num_env_steps_sampled": 10}
    assert Stopper({"env_runners/episode_return_mean": 30}).met(plain) is not None
    assert Stopper({"info/num_env_steps_sampled": 10}).met(plain) is not None


def test_evaluation_stop_keys_wait_for_the_first_evaluation():
    stopper = Stopper({"evaluation/env_runners/episode_return_mean": 100,
                       "evaluation/sampler_results/episode_reward_mean": 200})
    assert stopper.met(result(1, 10.0), warn=pytest.fail) is None
    why = stopper.met(result(2, 10.0, {"episode_reward_mean": 150.0, "episodes_this_iter": 2}))
    assert why == "evaluation/env_runners/episode_return_mean = 150 >= 100"


def test_a_misspelled_new_stack_key_is_refused_at_once():
    with pytest.raises(UsageError, match="env_runners/episode_return_meen.*did you mean "
                                         "'env_runners/episode_return_mean'"):
        Stopper({"env_runners/episode_return_meen": 30}).met(result(1, 10.0))


def test_a_sweeps_metric_in_either_stacks_name():
    trial = Trial("t0", "e", "PPO", {}, {}, "/tmp/t0")
    trial.record(result(4, 123.0))
    for key in ("env_runners/episode_return_mean", "sampler_results/episode_reward_mean",
                "episode_reward_mean"):
        assert trial.metric(key) == 123.0
    trial.record({"training_iteration": 1, "episode_reward_mean": 9.0})  # a function's report
    assert trial.metric("env_runners/episode_return_mean") == 9.0
    assert trial.metric("num_env_steps_sampled_lifetime") is None


def test_tensorboard_plots_each_value_once_and_files_keep_both(tmp_path):
    with ResultLogger(tmp_path) as logger:
        logger.log(result(1, 20.0, {"episode_reward_mean": 40.0, "episodes_this_iter": 1}))
    tags = set(tb_scalars(tmp_path))
    assert "ray/tune/episode_reward_mean" in tags
    assert "ray/tune/evaluation/episode_reward_mean" in tags
    assert not [t for t in tags if "env_runners" in t or t.endswith("_lifetime")], tags
    assert is_new_stack_duplicate("evaluation/env_runners/episode_return_mean")
    header = (tmp_path / "progress.csv").read_text().splitlines()[0].split(",")
    assert "env_runners/episode_return_mean" in header and "episode_reward_mean" in header
