"""How many torch threads a CPU learner takes (``num_cpus_per_learner``; 'auto' by
``AlgorithmConfig.learner_threads``): one beside runner processes, the driver's cores when
the learner in the driver is all that computes, what the user or a worker's environment says."""

from __future__ import annotations

import os

import psutil
import pytest
import torch

from rlmesh.algorithms.ppo_config import PPOConfig
from rlmesh.algorithms.sac_config import SACConfig
from rlmesh.roles.thread_choice import ThreadChoice
from rlmesh.roles.thread_choice import ThreadChoice
from rlmesh.runtime.process import process_cores


@pytest.fixture
def threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_process_cores_is_the_physical_cores_this_process_may_use(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cpus = len(os.sched_getaffinity(0))
    assert process_cores() == min(cpus, psutil.cpu_count(logical=False) or cpus)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # a worker's environment, or the user's
    assert process_cores() == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "many")  # not a count: as if unset
    assert process_cores() == min(cpus, psutil.cpu_count(logical=False) or cpus)


def test_auto_is_one_thread_beside_runner_processes_and_the_cores_when_alone(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "5")
    alone = SACConfig()  # num_env_runners 0: the driver samples between updates
    assert alone.learner_threads(in_driver=True) == 5
    assert alone.learner_threads() == 1  # a learner process
    assert SACConfig().env_runners(num_env_runners=1).learner_threads(in_driver=True) == 1
    assert PPOConfig().learner_threads(in_driver=True) == 1  # two runners by default
    parallel_eval = SACConfig().evaluation(evaluation_interval=1, evaluation_num_env_runners=1,
                                           evaluation_parallel_to_training=True)
    assert parallel_eval.learner_threads(in_driver=True) == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # tune's and launch's workers
    assert alone.learner_threads(in_driver=True) == 1


def test_a_number_is_the_users_wherever_the_learner_runs():
    config = PPOConfig().learners(num_cpus_per_learner=3)
    assert config.learner_threads() == config.learner_threads(in_driver=True) == 3


def test_the_algorithms_learner_times_its_thread_counts_and_keeps_one(monkeypatch, threads):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    config = (SACConfig().environment("Pendulum-v1")
              .reporting(min_sample_timesteps_per_iteration=400)
              .training(num_steps_sampled_before_learning_starts=64))
    with config.build() as algo:
        choice = algo.learner_group.local.thread_choice
        assert choice.counts == (1, 2) and choice.chosen is None
        algo.train()  # 84 updates: 8 timed (a warm-up and 3 at each count)
        assert choice.chosen in (1, 2) and torch.get_num_threads() == choice.chosen
    config = (PPOConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=1, num_envs_per_env_runner=1)
              .training(train_batch_size=64, minibatch_size=32, num_epochs=1))
    with config.build() as algo:  # beside a runner process: one thread, nothing timed
        assert algo.learner_group.local.thread_choice is None
        assert torch.get_num_threads() == 1


def test_a_number_by_hand_is_not_timed(monkeypatch, threads):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    config = SACConfig().environment("Pendulum-v1").learners(num_cpus_per_learner=2)
    with config.build() as algo:
        assert algo.learner_group.local.thread_choice is None
        assert torch.get_num_threads() == 2


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def run(choice, clock, cost, updates, samples=256):
    """``updates`` updates, each taking ``cost[threads]`` seconds per sample."""
    used = []
    for _ in range(updates):
        started = choice.begin()
        clock.now += cost[choice._current] * samples
        used.append(choice._current)
        choice.end(started, samples)
    return used


@pytest.mark.parametrize("fast", [1, 2])
def test_thread_choice_keeps_the_faster_count_and_times_again_after_hold_s(fast):
    clock, set_to = Clock(), []
    choice = ThreadChoice((2, 1), trials=3, hold_s=10.0, clock=clock, set_threads=set_to.append)
    cost = {fast: 1e-4, 3 - fast: 3e-4}
    used = run(choice, clock, cost, 8)
    assert used == [1] * 4 + [2] * 4  # each count: a warm-up, then 3 timed
    assert choice.chosen == fast and set_to[-1] == fast
    run(choice, clock, cost, 20)  # held
    assert choice._current == fast and set_to[-1] == fast
    held = len(set_to)
    run(choice, clock, cost, 20)
    assert len(set_to) == held  # no switch while held
    cost = {fast: 9e-4, 3 - fast: 1e-4}  # the load changed
    clock.now += 11.0
    run(choice, clock, cost, 8)
    assert choice.chosen == 3 - fast and set_to[-1] == 3 - fast
