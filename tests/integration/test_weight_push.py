"""Weights are announced, not polled: the param server pushes each new version to the
runners that subscribed, at most one push in flight per runner; runners never ask before a
fragment; a restarted runner subscribes again and catches up; learner actors publish to the
param server themselves, so the weights never pass through the driver."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import numpy as np
import pytest
import uvloop

from rlmesh.runtime.import_path import startup_code
from rlmesh.env.registry import env_registry
from rlmesh.runtime import Job

from rlmesh.roles.specs import RunnerSpec

RUNNER = "rlmesh.roles.env_runner:EnvRunner"
PARAM_SERVER = "rlmesh.roles.paramserver:ParamServer"
SMALL_MODEL = {"fcnet_hiddens": [16]}
SLEEP = "tests.integration.envs_for_tests:sleep_in_env"


def _runner_config() -> dict:
    config = {"env": "CartPole-v1", "num_envs_per_env_runner": 1, "rollout_fragment_length": 5,
              "seed": 0, "model": SMALL_MODEL, "_env_registry": env_registry()}
    config.update(startup_code(config))
    return config


def test_a_runner_takes_pushed_versions_without_ever_asking():
    """Twenty fragments, three publications: the runner subscribed once, each version came
    to it as a push (one each), and it never asked the param server for weights; every
    fragment after a publication acts with the newest version."""

    async def main():
        async with Job("ipc") as job:
            # In this process, as the driver has it: its pushes share the caller's handle.
            await job.spawn(PARAM_SERVER, name="param_server", in_process=True)
            ps = job.local_actor("param_server")
            runner = await job.spawn(RUNNER, spec=RunnerSpec.from_config_dict(
                _runner_config()).to_data(), name="env_runner-1")
            weights = {"default_policy": await runner.call("get_weights")}
            versions = [(await runner.call("sample"))["policy_version"]]
            for version in (1, 2, 3):
                await ps.set_weights(version, weights)
                for _ in range(6):
                    versions.append((await runner.call("sample"))["policy_version"])
            return versions, ps.stats(), await runner.call("metrics")

    versions, stats, metrics = uvloop.run(main())
    assert versions == [-1] + [1] * 6 + [2] * 6 + [3] * 6
    assert stats["subscriptions"] == 1 and stats["fetches"] == 0 and stats["pushes"] == 3
    assert metrics["num_weight_pushes"] == 3 and metrics["num_weight_pulls"] == 0
    assert metrics["num_weight_updates"] == 3


def test_a_runner_behind_is_sent_only_the_newest_version():
    """While a runner is busy (its push unanswered), versions 2..6 come out: the next push
    carries only the newest, never a queue of the ones between."""

    async def main():
        async with Job("ipc") as job:
            await job.spawn(PARAM_SERVER, name="param_server", in_process=True)
            ps = job.local_actor("param_server")
            runner = await job.spawn(RUNNER, spec=RunnerSpec.from_config_dict(
                _runner_config()).to_data(), name="env_runner-1")
            weights = {"default_policy": await runner.call("get_weights")}
            await runner.call("sample")  # subscribes
            # The runner's loop blocked for a while inside an env step: the push of version
            # 1 waits unanswered, and the publications after it queue nothing.
            busy = asyncio.ensure_future(runner.call("foreach_env", SLEEP, 1.0))
            await asyncio.sleep(0.2)
            for version in range(1, 7):
                await ps.set_weights(version, weights)
            await busy
            while ps.stats()["pushes"] < 2 or ps.stats()["pushes_in_flight"]:
                await asyncio.sleep(0.02)
            fragment = await runner.call("sample")
            return ps.stats(), await runner.call("metrics"), fragment["policy_version"]

    stats, metrics, version = uvloop.run(main())
    assert stats["pushes"] == 2 and metrics["num_weight_pushes"] == 2  # version 1, then 6
    assert version == 6 and metrics["num_weight_updates"] == 1


def _kill_and_wait_for_restart(algo) -> None:
    os.kill(algo.env_runners.foreach_env_runner("pid")[0], signal.SIGKILL)
    deadline = time.monotonic() + 60
    while algo.mesh.runners.restarts < 1 or algo.env_runners.num_healthy_env_runners() < 1:
        assert time.monotonic() < deadline, "the killed runner never came back"
        time.sleep(0.1)


def test_a_restarted_runner_subscribes_again_and_samples_with_the_current_weights():
    from rlmesh.algorithms.ppo import PPOConfig

    config = (PPOConfig().environment("CartPole-v1").debugging(seed=0)
              .env_runners(num_env_runners=1, rollout_fragment_length=50)
              .training(train_batch_size=100, minibatch_size=50, num_epochs=1))
    with config.build() as algo:
        for _ in range(2):
            algo.train()
        _kill_and_wait_for_restart(algo)
        version = algo.mesh.version
        fragments = algo.env_runners.sample(100)
        stats = algo.mesh.job.local_actor("param_server").stats()
        metrics = algo.env_runners.foreach_env_runner("metrics")[0]
    # The new process got the weights of version 3 in its subscription's reply.
    assert version == 3 and [f["policy_version"] for f in fragments] == [3, 3]
    assert stats["subscriptions"] == 2 and stats["fetches"] == 0
    assert metrics["num_weight_updates"] == 1 and metrics["num_weight_pulls"] == 0


def test_broadcast_interval_bounds_the_pushes_to_the_runners():
    """IMPALA with broadcast_interval 4: every runner is pushed at most one version per 4
    learner updates (and the first), and asks for none itself."""
    from rlmesh.algorithms.impala import ImpalaConfig

    config = (ImpalaConfig().environment("CartPole-v1").debugging(seed=0)
              .env_runners(num_env_runners=1, num_envs_per_env_runner=4,
                           rollout_fragment_length=25)
              .training(train_batch_size=100, broadcast_interval=4)
              .reporting(min_time_s_per_iteration=0.5))
    with config.build() as algo:
        updates = sum(algo.train()["num_learner_updates"] for _ in range(3))
        stats = algo.mesh.job.local_actor("param_server").stats()
        metrics = algo.env_runners.foreach_env_runner("metrics")[0]
    assert updates >= 8, updates
    assert 2 <= stats["pushes"] <= 2 + updates // 4, (stats, updates)
    assert stats["versions"]["default_policy"] % 4 == 0  # a due version, not every update's
    assert stats["fetches"] == 0 and metrics["num_weight_pulls"] == 0
    # The runner counts a push when it takes it, the param server when its answer is back:
    # the last one may be between the two.
    assert stats["pushes"] <= metrics["num_weight_pushes"] <= stats["pushes"] + 1


@pytest.mark.parametrize("num_learners", [0, 1])
def test_a_learner_actor_publishes_to_the_param_server_itself(num_learners):
    """With a learner actor, the weights go learner -> param server -> runners: the driver
    sends none (it learns only the version); with the learner in the driver, it sends them.
    Either way the runners act with the newest version and the driver's own copy
    (get_policy) holds the learner's weights when used."""
    from rlmesh.algorithms.ppo import PPOConfig

    config = (PPOConfig().environment("CartPole-v1").debugging(seed=0)
              .env_runners(num_env_runners=1, rollout_fragment_length=50)
              .learners(num_learners=num_learners)
              .training(train_batch_size=100, minibatch_size=50, num_epochs=1))
    with config.build() as algo:
        lags = [algo.train()["policy_lag_max"] for _ in range(3)]
        version = algo.mesh.version
        fragment_versions = {f["policy_version"] for f in algo.env_runners.sample(100)}
        sent = algo.mesh.weights_bytes_published
        learner = algo.learner_group.get_weights()["default_policy"]
        copy = algo.get_policy().get_weights()
        published = (algo.learner_group.foreach_learner("pop_metrics")[0]["num_weights_published"]
                     if num_learners else None)
    assert version == 4 and fragment_versions == {4} and lags == [0, 0, 0]
    if num_learners:
        assert sent == 0 and published == 4
    else:
        assert sent > 4 * 4 * 64  # four publications of a 64-unit MLP, at least
    for name, value in learner.items():
        np.testing.assert_array_equal(copy[name], value)
