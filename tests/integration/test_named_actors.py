"""Named actors from a user's script (rlmesh.named_actors): PPO on CartPole with two env
runners whose envs count every reset in a named counter, a callback recording each
finished episode there, the driver reading it; calls refused by name while the actor lives
on; every actor process gone after stop()."""

from __future__ import annotations

import time

import numpy as np
import psutil
import pytest

import rlmesh
from examples import named_actor_counter
from rlmesh.algorithms.ppo import PPOConfig
from rlmesh.config.settings import ConfigError
from rlmesh.named_actors import ActorNotFound, RemoteError

from .named_actor_classes import Curriculum, Stats


def _wait_for(check, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_counter_shared_by_the_envs_of_two_runners_a_callback_and_the_driver():
    cfg = named_actor_counter.config(num_env_runners=2).training(
        train_batch_size=400, minibatch_size=200, num_epochs=1)
    cfg.named_actors = {**cfg.named_actors,
                        "curriculum": {"class": Curriculum, "kwargs": {"level": 3}},
                        "stats": {"class": "tests.integration.named_actor_classes:Stats",
                                  "kwargs": {"size": 4}}}
    algo = cfg.build()
    try:
        result = algo.train()
        counter = rlmesh.get_actor("counter")
        # Every episode the run reported ended in a callback's tell to the counter.
        _wait_for(lambda: counter.call("counts")["finished"] >= result["episodes_total"])
        counts = counter.call("counts")
        assert counts["finished"] >= result["episodes_total"] > 2
        # Each env counted its reset before playing: 2 runners x 2 envs mid-episode at least.
        assert counts["started"] >= counts["finished"] + 4
        assert set(counts["started_by_runner"]) == {"1", "2"}  # both runners' envs reached it
        assert result["episodes_counted"]["started"] > 0  # on_train_result, in the driver
        assert counter.call("counts")["started"] >= counts["started"]

        # A Actor subclass with async methods, reaching the counter from its own process.
        curriculum = rlmesh.get_actor("curriculum")
        assert curriculum.call("promote") == 4 and curriculum.call("get_level") == 4
        assert curriculum.call("counter_started") >= counts["started"]

        # A plain class: arrays both ways, a static method, errors by name, the actor lives on.
        stats = rlmesh.get_actor("stats")
        np.testing.assert_array_equal(stats.call("add", np.ones(4, np.float32)), np.ones(4))
        assert stats.call("version") == "1"
        with pytest.raises(RemoteError, match=r"UnknownCall in actor 'stats': .*Stats serves no "
                                              r"call 'reset' \(it serves: add, fail, pid, version\)"):
            stats.call("reset")
        with pytest.raises(RemoteError, match=r"BadRequest.*add\(values"):
            stats.call("add")
        with pytest.raises(RemoteError, match="ValueError.*stats cannot do that"):
            stats.call("fail")
        np.testing.assert_array_equal(stats.call("add", np.ones(4, np.float32)), 2 * np.ones(4))
        with pytest.raises(ActorNotFound, match=r"no actor named 'countr'.*named actors: "
                                                r"counter, curriculum, stats"):
            rlmesh.get_actor("countr", timeout=0.2)
        pids = [stats.call("pid")] + [algo.mesh.job.run_dir.read_process(n).pid
                                for n in ("counter", "curriculum")]
    finally:
        algo.stop()
    _wait_for(lambda: not any(psutil.pid_exists(p) for p in pids))
    assert not any(psutil.pid_exists(p) for p in pids), "a named actor outlived stop()"
    with pytest.raises(RuntimeError, match="no run in this process"):
        rlmesh.get_actor("counter")


@pytest.mark.parametrize("named_actors, match", [
    ({"env_runner-1": "x.y:Z"}, "one of the run's own processes"),
    ({"counter": {"class": "x.y:Z", "args": [1]}}, r"unknown keys \['args'\]"),
    ({"counter": "no_colon"}, "must look like 'package.module:Class'"),
])
def test_a_bad_named_actors_setting_is_one_line_before_any_process(named_actors, match):
    cfg = (PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=1)
           .callbacks(named_actors=named_actors))
    with pytest.raises(ConfigError, match=match):
        cfg.build()


def test_an_actor_that_cannot_be_imported_says_which_and_why():
    cfg = (PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=1)
           .callbacks(named_actors={"counter": "tests.integration.named_actor_classes:Nope"}))
    with pytest.raises(Exception, match=r"(?s)named actor .counter. .* did not start.*has no attribute .Nope."):
        cfg.build()
