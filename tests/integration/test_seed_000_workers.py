"""Seed 000, "Accessing Policy State": ``trainer.workers`` as the Training APIs page uses it,
on one trainer with two env runner processes: the local worker's policy map, lambdas run on
every worker through foreach_worker(_with_index), closures reaching every env as the user
built it (their gym.Wrapper included), and a lambda that raises in a runner."""

from __future__ import annotations

import numpy as np
import pytest

from rlmesh.agents.ppo import PPOTrainer
from rlmesh.driver.worker_set import WorkerError
from tests.integration.seed_000_envs import CurriculumEnv


@pytest.fixture(scope="module")
def trainer():
    config = {"num_gpus": 0, "num_workers": 2, "num_envs_per_env_runner": 2,
              "rollout_fragment_length": 25, "train_batch_size": 100,
              "sgd_minibatch_size": 50, "num_sgd_iter": 1, "model": {"fcnet_hiddens": [16]}}
    algo = PPOTrainer(config=config, env=CurriculumEnv)
    try:
        algo.train()
        yield algo
    finally:
        algo.stop()


def test_local_policy_weights_two_ways_and_each_workers_copy(trainer):
    mine = trainer.get_policy().get_weights()
    local = trainer.workers.local_worker().policy_map["default_policy"].get_weights()
    assert mine.keys() == local.keys() and all(np.array_equal(mine[k], local[k]) for k in mine)
    everyone = trainer.workers.foreach_worker(lambda ev: ev.get_policy().get_weights())
    assert len(everyone) == 3  # the local worker, then the two runners
    for weights in everyone[1:]:  # a runner acts with the policy's part of the model
        assert weights and set(weights) <= set(mine)
        for name, value in weights.items():  # after train(): the weights train() made
            np.testing.assert_array_equal(value, mine[name])
    indexed = trainer.workers.foreach_worker_with_index(
        lambda ev, i: (i, sorted(ev.get_policy().get_weights())))
    assert [i for i, _ in indexed] == [0, 1, 2]
    assert indexed[1][1] == indexed[2][1] == sorted(everyone[1])


def test_a_closure_over_a_local_reaches_every_env_through_the_users_wrapper(trainer):
    for phase in (3, 1):
        trainer.workers.foreach_worker(
            lambda ev: ev.foreach_env(lambda env: env.set_phase(phase)))
        seen = trainer.workers.foreach_worker(
            lambda ev: ev.foreach_env(lambda env: env.phases()))
        assert seen[0] == []  # the driver steps no env
        assert seen[1:] == [[[phase, phase]] * 2] * 2  # 2 runners x 2 envs, wrapper and env


def test_a_lambda_that_raises_in_a_runner_is_one_error_naming_it(trainer):
    with pytest.raises(WorkerError) as err:
        trainer.workers.foreach_worker(lambda ev: ev.foreach_env(lambda env: env.no_such()))
    line = str(err.value)
    assert "\n" not in line and "env_runner-" in line, line
    assert "AttributeError" in line and "no_such" in line, line
    assert "no_such" in err.value.remote_traceback
    # the runners serve on
    assert len(trainer.workers.foreach_worker_with_index(lambda ev, i: i)) == 3


def test_a_lambda_on_a_launched_cluster_is_one_line(trainer, monkeypatch):
    import rlmesh.driver.env_runner_group as group

    monkeypatch.setattr(group, "jobs_are_local", lambda: False)
    with pytest.raises(ValueError, match="define it at module level") as err:
        trainer.workers.foreach_worker(lambda ev: 1)
    assert "\n" not in str(err.value)
