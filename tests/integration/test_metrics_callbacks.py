"""RLlib new-stack callbacks ported by their imports: a MetricsLogger value logged per episode
in the env runners reaches result["env_runners"], result.json and TensorBoard; the
episodes' getters work in real single- and multi-agent runs; on_train_result's
metrics_logger lands at the result's top level."""

from __future__ import annotations

import json

import numpy as np

from rlmesh.algorithms import PPOConfig
from rlmesh.callbacks.callbacks import RLlibCallback
from rlmesh.core.learner import Learner
from rlmesh.env.multi_agent_episode import MultiAgentEpisode
from rlmesh.env.single_agent_episode import SingleAgentEpisode
from rlmesh.results import ResultLogger
from rlmesh.utils.metrics import (ALL_MODULES, ENV_RUNNER_RESULTS, EPISODE_RETURN_MEAN,
                                  LEARNER_RESULTS)

from tests.integration.test_video import tensorboard_tags


class PoleAngle(RLlibCallback):
    """The brief's example, as an RLlib user writes it (plus checks of what it is handed)."""

    def on_episode_start(self, *, episode, env_runner, metrics_logger, env, env_index,
                         **kwargs):
        assert isinstance(episode, SingleAgentEpisode)
        assert len(episode) == 0 and len(episode.get_observations()) == 1
        assert env is not None and metrics_logger is env_runner.metrics

    def on_episode_step(self, *, episode, env_runner, metrics_logger, env, env_index,
                        rl_module=None, **kwargs):
        episode.custom_data.setdefault("angles", []).append(
            abs(episode.get_observations(-1)[2]))
        # The history the getters read: one observation more than actions.
        assert len(episode.get_observations()) == len(episode.get_actions()) + 1 == len(episode) + 1

    def on_episode_end(self, *, episode, metrics_logger, **kwargs):
        assert episode.is_done and len(episode.custom_data["angles"]) == len(episode)
        assert episode.get_return() == sum(episode.get_rewards())
        metrics_logger.log_value("pole_angle", float(np.mean(episode.custom_data["angles"])),
                                 reduce="mean", window=50)
        metrics_logger.log_value("episodes_seen", 1, reduce="sum")

    def on_train_result(self, *, algorithm, metrics_logger, result, **kwargs):
        metrics_logger.log_value("train_result_calls", 1, reduce="sum")


def test_pole_angle_reaches_result_json_and_tensorboard(tmp_path):
    config = (PPOConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=2, num_envs_per_env_runner=2,
                           rollout_fragment_length=100)
              .training(train_batch_size=400, minibatch_size=200, num_epochs=1)
              .callbacks(PoleAngle))
    logger = ResultLogger(tmp_path)
    with config.build() as algo:
        results = [algo.train() for _ in range(3)]
        for result in results:
            logger.log(result)
    logger.close()
    last = results[-1]
    group = last[ENV_RUNNER_RESULTS]
    # A mean of absolute pole angles: positive, below CartPole's 0.21 rad termination angle.
    assert 0.0 < group["pole_angle"] < 0.21
    assert EPISODE_RETURN_MEAN in group
    # A lifetime sum over both runners: every episode that ended, counted once.
    assert group["episodes_seen"] == last["episodes_total"]
    assert last["train_result_calls"] == 3
    rows = [json.loads(line) for line in (tmp_path / "result.json").read_text().splitlines()]
    assert len(rows) == 3 and rows[-1][ENV_RUNNER_RESULTS]["pole_angle"] == group["pole_angle"]
    tags = {tag for tag, kind in tensorboard_tags(tmp_path) if kind == "scalar"}
    assert any(tag.endswith("env_runners/pole_angle") for tag in tags), sorted(tags)[:20]


class AgentReturns(RLlibCallback):
    """Multi-agent getters in a real run: each agent's observations and rewards."""

    def on_episode_step(self, *, episode, metrics_logger, **kwargs):
        assert isinstance(episode, MultiAgentEpisode)
        last = episode.get_observations(-1)
        assert last and set(last) <= episode.agent_ids
        for aid, agent in episode.agent_episodes.items():
            assert len(agent.get_observations()) == len(agent) + 1
            assert agent.module_id == episode.module_for(aid)

    def on_episode_end(self, *, episode, metrics_logger, **kwargs):
        per_agent = sum(sum(e.get_rewards()) for e in episode.agent_episodes.values())
        assert abs(per_agent - episode.get_return()) < 1e-6
        metrics_logger.log_value("agents_per_episode", len(episode.agent_ids), reduce="max")
        for aid, agent in episode.agent_episodes.items():
            metrics_logger.log_value(("agent_steps", str(aid)), len(agent), window=10)


def test_multi_agent_episode_getters_in_a_real_run():
    # Episodes of 20 steps: "stayer" acts in each, "leaver" in the first 3 (multi_agent_envs.py).
    config = (PPOConfig().environment("tests.integration.multi_agent_envs:make_early_leaver")
              .multi_agent(policies={"stayer", "leaver"},
                           policy_mapping_fn="tests.integration.multi_agent_envs:by_agent")
              .env_runners(num_env_runners=1, rollout_fragment_length=40)
              .training(train_batch_size=80, minibatch_size=40, num_epochs=1)
              .callbacks(AgentReturns))
    with config.build() as algo:
        algo.train()
        result = algo.train()
    group = result[ENV_RUNNER_RESULTS]
    assert group["agents_per_episode"] == 2
    assert group["agent_steps"] == {"stayer": 20.0, "leaver": 3.0}


class LoggingLearner(Learner):
    """A user's Learner logging into self.metrics from its loss, per module and for all."""

    def compute_loss_for_module(self, *, module_id, config, batch, fwd_out):
        loss = super().compute_loss_for_module(module_id=module_id, config=config, batch=batch,
                                               fwd_out=fwd_out)
        self.metrics.log_value((module_id, "batch_rows"), len(batch["value_targets"]),
                               reduce="max")
        self.metrics.log_value((ALL_MODULES, "loss_calls"), 1, reduce="sum",
                               clear_on_reduce=True)
        return loss


def test_learner_metrics_reach_result_learners(tmp_path):
    config = (PPOConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=1, rollout_fragment_length=100)
              .training(train_batch_size=200, minibatch_size=50, num_epochs=2,
                        learner_class=LoggingLearner)
              .learners(num_learners=1))
    logger = ResultLogger(tmp_path)
    with config.build() as algo:
        result = algo.train()
        logger.log(result)
    logger.close()
    learners = result[LEARNER_RESULTS]
    assert learners["default_policy"]["batch_rows"] == 50
    # 200 rows in minibatches of 50, two epochs: 8 loss calls in the iteration
    assert learners[ALL_MODULES]["loss_calls"] == 8
    assert "total_loss" in learners["default_policy"]  # the update's own statistics too
    assert result["info"]["learner"]["default_policy"]["batch_rows"] == 50
    tags = {tag for tag, kind in tensorboard_tags(tmp_path)}
    assert any(t.endswith("learners/__all_modules__/loss_calls") for t in tags)
    assert not any("learners/default_policy" in t for t in tags)  # plotted once, as info/learner


class StepCounter(RLlibCallback):
    def on_episode_end(self, *, episode, metrics_logger, env_runner, **kwargs):
        metrics_logger.log_value("episode_len_seen", len(episode), reduce="max", window=1000)
        metrics_logger.log_value("runner_kind", 1.0 if env_runner.in_evaluation else 0.0,
                                 reduce="max", window=1000)


def test_streaming_runners_and_evaluation_runners_metrics():
    """APPO's runners stream fragments to the learner: their values still reach the
    driver; evaluation runners' go to result["evaluation"]["env_runners"]."""
    from rlmesh.algorithms.appo_config import APPOConfig

    config = (APPOConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=1, rollout_fragment_length=50)
              .training(train_batch_size=200)
              .reporting(min_time_s_per_iteration=1)
              .evaluation(evaluation_interval=1, evaluation_duration=2,
                          evaluation_num_env_runners=1)
              .callbacks(StepCounter))
    with config.build() as algo:
        for _ in range(10):
            result = algo.train()
            if ENV_RUNNER_RESULTS in result and "episode_len_seen" in result[ENV_RUNNER_RESULTS]:
                break
    group = result[ENV_RUNNER_RESULTS]
    assert group["episode_len_seen"] >= 8 and group["runner_kind"] == 0.0
    evaluation = result["evaluation"][ENV_RUNNER_RESULTS]
    assert evaluation["runner_kind"] == 1.0 and evaluation["episode_len_seen"] >= 8


def pole_angle_fn(*, episode, metrics_logger, **kwargs):
    metrics_logger.log_value("fn_pole_angle", float(np.abs(episode.get_observations(-1)[2])),
                             reduce="mean")


class CountsEpisodes(RLlibCallback):
    def on_episode_end(self, *, metrics_logger, **kwargs):
        metrics_logger.log_value("class_episodes", 1, reduce="sum")


def test_hook_functions_run_after_the_class_hooks_on_the_runners():
    """RLlib 2.40's config.callbacks(cls, on_episode_end=fn): a module-level function and a
    lambda (handed to the runner process), each called with the hook's keyword arguments."""
    config = (PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=1)
              .training(train_batch_size=400, minibatch_size=200, num_epochs=1)
              .callbacks(CountsEpisodes, on_episode_end=[
                  pole_angle_fn,
                  lambda *, episode, metrics_logger, **kw: metrics_logger.log_value(
                      "fn_length", len(episode), reduce="max")]))
    algo = config.build()
    try:
        result = algo.train()
    finally:
        algo.stop()
    runners = result["env_runners"]
    assert 0 < runners["fn_pole_angle"] < 0.3  # CartPole ends past 0.21 rad
    assert runners["fn_length"] >= 8 and runners["class_episodes"] >= 1


def test_a_hook_function_under_a_wrong_name_is_one_line():
    import pytest

    from rlmesh.config.settings import ConfigError

    with pytest.raises(ConfigError, match="on_episode_ended= is not a callback hook; did you "
                                          "mean 'on_episode_end'"):
        PPOConfig().callbacks(on_episode_ended=pole_angle_fn)


def test_the_metrics_callback_example_writes_its_metrics(tmp_path):
    from examples import metrics_callback

    results = metrics_callback.train(str(tmp_path), iterations=2, log=False)
    rows = [json.loads(line) for line in (tmp_path / "result.json").read_text().splitlines()]
    assert len(rows) == 2
    runners = rows[-1][ENV_RUNNER_RESULTS]
    assert 0.0 < runners["pole_angle"] < 0.21
    assert runners["longest_episode"] == results[-1][ENV_RUNNER_RESULTS]["longest_episode"] >= 8
    tags = {tag for tag, kind in tensorboard_tags(tmp_path) if kind == "scalar"}
    assert any(tag.endswith("env_runners/pole_angle") for tag in tags)
