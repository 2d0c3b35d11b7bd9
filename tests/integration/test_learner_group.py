"""LearnerGroup's RLlib calls through a real run: update_from_batch with minibatch_size and
num_iters, and async_update handing back the statistics of updates that finished."""

from __future__ import annotations

import time

from rlmesh.algorithms import PPOConfig
from rlmesh.driver.env_runner_group import synchronous_parallel_sample
from rlmesh.rl.columns import merge_by_policy


def config(num_learners: int) -> PPOConfig:
    return (PPOConfig().environment("CartPole-v1")
            .env_runners(num_env_runners=1, num_envs_per_env_runner=4)
            .training(train_batch_size=400, minibatch_size=100, num_epochs=2,
                      model={"fcnet_hiddens": [16]})
            .learners(num_learners=num_learners).debugging(seed=0))


def test_update_from_batch_takes_minibatch_size_num_iters_and_async_update():
    for num_learners in (0, 1):
        with config(num_learners).build() as algo:
            fragments = synchronous_parallel_sample(algo.env_runners, max_env_steps=400)
            batch = merge_by_policy(fragments)
            steps = sum(f["env_steps"] for f in fragments)
            group = algo.learner_group
            stats = group.update_from_batch(batch, minibatch_size=50, num_iters=3)
            # ceil(steps / 50) minibatches in each of 3 epochs
            assert stats["default_policy"]["num_grad_updates"] == 3 * -(-steps // 50)
            first = group.update_from_batch(batch, num_iters=1, async_update=True)
            assert isinstance(first, list)
            done = list(first)
            deadline = time.monotonic() + 30
            while not done and time.monotonic() < deadline:
                time.sleep(0.05)
                done = group.update_from_batch(batch, num_iters=1, async_update=True)
            assert done and done[0]["default_policy"]["num_env_steps_trained"] == steps
