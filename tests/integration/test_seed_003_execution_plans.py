"""Seed 003's execution plans run as written (ray.rllib -> rlmesh): PPO's plan chained from
RLlib's operators, and an A3C-style plan swapped into PPOTrainer with ``with_updates``
(tests/integration/seed_003_plans.py), trained on CartPole with real runner processes; and
the one-line errors of plans and operators that go wrong."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest

from rlmesh.algorithms.execution import PlanWorkers
from rlmesh.algorithms.ppo import PPO
from rlmesh.execution import rollout_ops
from rlmesh.execution.metric_ops import UpdateKL
from rlmesh.execution.rollout_ops import Fragments
from rlmesh.execution.train_ops import ApplyGradients, TrainOneStep, TrainTFMultiGPU
from tests.integration import seed_003_plans as plans

pytestmark = pytest.mark.timeout(120)

RLLIB_KEYS = ("episode_reward_mean", "episode_len_mean", "episodes_this_iter", "timesteps_total",
              "training_iteration", "time_this_iter_s", "info", "num_env_steps_trained")


def test_ppos_plan_of_rllibs_operators_trains_cartpole(caplog, monkeypatch):
    monkeypatch.setattr(rollout_ops, "_said", set())  # said once per process: from here
    # 5 rounds of one 100-step fragment make each 500-step train batch (ConcatBatches).
    config = {"num_workers": 1, "rollout_fragment_length": 100, "train_batch_size": 500,
              "sgd_minibatch_size": 100, "num_sgd_iter": 6, "lr": 1e-3, "seed": 0}
    algo = plans.PlanPPOTrainer(config=config, env="CartPole-v1")
    with caplog.at_level(logging.WARNING, logger="rlmesh.execution.rollout_ops"):
        try:
            results = [algo.train() for _ in range(7)]
        finally:
            algo.stop()
    assert all(key in r for r in results for key in RLLIB_KEYS)
    assert [r["training_iteration"] for r in results] == list(range(1, 8))
    assert [r["timesteps_total"] for r in results] == [500 * i for i in range(1, 8)]
    assert results[-1]["num_env_steps_trained"] == 3500
    stats = results[-1]["info"]["learner"]["default_policy"]
    assert stats["num_grad_updates"] == 6 * 5  # num_sgd_iter passes of 5 minibatches of 100
    assert stats["cur_kl_coeff"] > 0 and math.isfinite(stats["vf_loss"])
    rewards = [r["episode_reward_mean"] for r in results]
    assert rewards[-1] > 1.4 * rewards[0] and rewards[-1] > 35, rewards
    said = [r.getMessage() for r in caplog.records if "StandardizeFields" in r.getMessage()]
    assert len(said) == 1 and "on the learner" in said[0]  # advantages: said once, not dropped


def test_a3c_style_plan_swapped_into_ppotrainer_applies_runner_gradients():
    config = {"num_workers": 2, "rollout_fragment_length": 50, "lr": 1e-3, "seed": 0}
    algo = plans.AsyncGradientsPPO(config=config, env="CartPole-v1")
    try:
        assert isinstance(algo, PPO) and type(algo).__name__ == "PPO"
        assert algo.workers.trainable_policies() == ["default_policy"]
        before = algo.get_weights()["default_policy"]
        results = [algo.train() for _ in range(4)]
        after = algo.get_weights()["default_policy"]
        workers = PlanWorkers(algo)  # operators given what a plan is not: one line each
        with pytest.raises(ValueError, match="ApplyGradients takes \\(gradients, count\\)"):
            ApplyGradients(workers, update_all=False)(Fragments())
        with pytest.raises(TypeError, match="TrainOneStep takes the batches ParallelRollouts"):
            TrainOneStep(workers)({"obs": np.zeros(3)})
        with pytest.raises(ValueError, match="report no KL .*leave it out"):
            UpdateKL(workers)({"default_policy": {"vf_loss": 1.0}})
        with pytest.raises(TypeError, match="takes the workers an execution_plan"):
            TrainOneStep(algo.workers)
    finally:
        algo.stop()
    # An iteration is one gradient (min_time_s_per_iteration 0): one 50-step fragment.
    assert [r["timesteps_total"] for r in results] == [50, 100, 150, 200]
    assert results[-1]["num_env_steps_trained"] == 200
    for r in results:
        stats = r["info"]["learner"]["default_policy"]
        assert {"policy_loss", "vf_loss", "total_loss"} <= set(stats)
        assert all(math.isfinite(v) for v in stats.values())
    assert any(not np.allclose(before[k], after[k]) for k in before)


def test_async_rollouts_train_on_fragments_as_each_runner_delivers():
    config = {"num_workers": 2, "rollout_fragment_length": 50, "train_batch_size": 200}
    algo = plans.AsTheyComePPO(config=config, env="CartPole-v1")
    try:
        results = [algo.train() for _ in range(3)]
    finally:
        algo.stop()
    assert [r["timesteps_total"] for r in results] == [200, 400, 600]
    assert results[-1]["num_env_steps_trained"] == 600
    # 2 passes of 2 minibatches of 100: TrainOneStep's arguments reached the learner.
    assert results[-1]["info"]["learner"]["default_policy"]["num_grad_updates"] == 4


def test_a_plan_whose_items_are_batches_is_one_line():
    algo = plans.BatchesOnlyTrainer(config={"num_workers": 0, "train_batch_size": 100,
                                            "rollout_fragment_length": 50,
                                            "sgd_minibatch_size": 50}, env="CartPole-v1")
    try:
        with pytest.raises(TypeError) as wrong:
            algo.train()
    finally:
        algo.stop()
    text = str(wrong.value)
    assert "\n" not in text and "gave Fragments" in text and "StandardMetricsReporting" in text


def test_operators_rlmesh_does_not_build_are_one_line():
    for module, name in (("concurrency_ops", "Concurrently"), ("replay_ops", "MixInReplay"),
                         ("metric_ops", "CollectMetrics")):
        with pytest.raises(ImportError) as refused:
            exec(f"from rlmesh.execution.{module} import {name}", {})
        assert "\n" not in str(refused.value) and "training_step" in str(refused.value)
    with pytest.raises(NotImplementedError, match="TensorFlow's multi-GPU op; .* TrainOneStep"):
        TrainTFMultiGPU(None, num_gpus=1)
