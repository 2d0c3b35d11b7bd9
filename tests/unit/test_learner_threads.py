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


def test_the_algorithms_learner_takes_them(monkeypatch, threads):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    with SACConfig().environment("Pendulum-v1").build() as algo:
        assert torch.get_num_threads() == 2
        assert algo.train()["timesteps_total"] > 0
    config = (PPOConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=1, num_envs_per_env_runner=1)
              .training(train_batch_size=64, minibatch_size=32, num_epochs=1))
    with config.build() as algo:
        assert torch.get_num_threads() == 1
