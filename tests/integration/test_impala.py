"""IMPALA and APPO end to end through the Python API: they learn, report the pipeline
(policy lag, queues, aggregators), data-parallel learners stay identical, killed runners
and aggregators are replaced, a dead learner stops the run naming the checkpoint, and
`rlmesh train --resume` goes on from it."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from rlmesh.algorithms import ConfigError
from rlmesh.algorithms.appo_config import APPOConfig
from rlmesh.driver.asynchronous import LearnerFailed
from rlmesh.algorithms.impala_config import ImpalaConfig

RLMESH = [sys.executable, "-m", "rlmesh.cli.main"]


def cartpole(cls=ImpalaConfig, runners: int = 2, **training):
    return (cls().environment("CartPole-v1")
            .env_runners(num_env_runners=runners, num_envs_per_env_runner=4,
                         rollout_fragment_length=50)
            .training(**{"lr": 1e-3, "train_batch_size": 400, "vf_loss_coeff": 0.5,
                         "entropy_coeff": 0.0,
                         "model": {"fcnet_hiddens": [64, 64], "vf_share_layers": False},
                         **training})
            .reporting(min_time_s_per_reporting=0.5)
            .debugging(seed=3))


def train_until(algo, reward: float, iterations: int) -> tuple[float, dict]:
    best = -math.inf
    for _ in range(iterations):
        result = algo.train()
        best = max(best, result["episode_reward_mean"])
        if best >= reward:
            break
    return best, result


async def inproc_learner(job, cfg):
    """A recording param server and an IMPALA learner actor as tasks of ``job`` (inproc),
    the learner's update loop started and its first weights published: (param server,
    learner, the first version)."""
    import gymnasium as gym

    from rlmesh.algorithms.impala import ImpalaTorchPolicy
    from rlmesh.policy.policy_spec import PolicySpec

    env = gym.make("CartPole-v1")
    specs = {"default_policy": PolicySpec(ImpalaTorchPolicy).resolved(
        None, env.observation_space, env.action_space).to_data(cfg)}
    ps = await job.spawn("tests.integration.envs_for_tests:RecordingParamServer",
                         name="param_server")
    learner = await job.spawn("rlmesh.roles.learner_actor:LearnerActor", config=cfg.to_dict(),
                              config_cls="rlmesh.algorithms.impala_config:ImpalaConfig",
                              policy_specs=specs, name="learner-0")
    await learner.call("start_async")
    return ps, learner, await learner.call("publish")


@pytest.mark.parametrize("interval", [1, 3])
def test_weights_go_out_every_broadcast_interval_updates(interval):
    """The learner publishes after every ``broadcast_interval``-th update (and once at
    the start), in order; what it publishes is the weights of that version."""
    import asyncio

    import uvloop

    from rlmesh.runtime import Job
    from tests.benchmarks.impala_actors import cartpole_fragment

    cfg = cartpole(broadcast_interval=interval, train_batch_size=400)

    async def main():
        async with Job("inproc") as job:
            ps, learner, first = await inproc_learner(job, cfg)
            for i in range(10):  # a fragment of 50 x 8 steps is a batch of 400: 10 updates
                await learner.call("add_fragment", cartpole_fragment(seed=i))
            for _ in range(600):
                if await learner.call("num_updates") >= 10:
                    break
                await asyncio.sleep(0.05)
            for _ in range(100):  # the last publication may still be on its way
                versions = await ps.call("versions")
                if versions and versions[-1] >= first + 10 - (first + 10) % interval:
                    break
                await asyncio.sleep(0.05)
            weights = (await learner.call("get_weights"))["default_policy"]
            held = (await ps.call("get_weights", {"default_policy": 0}))["default_policy"]
            return first, versions, weights, held

    first, versions, weights, held = uvloop.run(main())
    assert first == 1 and versions[0] == 1  # the start: version 1, before any update
    due = [v for v in range(first + 1, first + 11) if v % interval == 0]  # 10 updates
    # Only due versions, in order; one not yet sent when the next came may be skipped
    # (superseded), never the last.
    assert set(versions[1:]) <= set(due) and versions[1:] == sorted(set(versions[1:]))
    assert versions[-1] == due[-1]
    assert held[0] == versions[-1]
    if versions[-1] == first + 10:  # the last update was published: the same weights
        for k, v in weights.items():
            np.testing.assert_array_equal(held[1][k], v)


def test_impala_learns_cartpole_through_an_aggregator():
    config = cartpole().learners(num_aggregation_workers=1)
    with config.build() as algo:
        best, result = train_until(algo, 100, 60)
        assert best >= 100, f"IMPALA did not learn CartPole: best mean reward {best}"
        assert 0 < result["num_env_steps_trained"] <= result["timesteps_total"]
        assert result["num_learner_updates"] > 0
        assert 0 <= result["policy_lag_mean"] <= result["policy_lag_max"]
        (aggregator,) = result["aggregators"]
        assert aggregator["num_batches"] > 0 and aggregator["num_fragments"] > 0
        stats = result["info"]["learner"]["default_policy"]
        for key in ("policy_loss", "vf_loss", "entropy", "vf_explained_var", "gradients_norm"):
            assert np.isfinite(stats[key]), key
        # the driver's copy follows the learner: compute_single_action acts
        assert algo.compute_single_action(np.zeros(4, np.float32)) in (0, 1)


def test_appo_learns_cartpole_with_a_learner_process_and_replay():
    config = cartpole(APPOConfig, use_kl_loss=True, num_sgd_iter=2, minibatch_buffer_size=2,
                      replay_proportion=0.5, replay_buffer_num_slots=4).learners(num_learners=1)
    with config.build() as algo:
        best, result = train_until(algo, 100, 60)
        assert best >= 100, f"APPO did not learn CartPole: best mean reward {best}"
        assert result["num_batches_replayed"] > 0
        stats = result["info"]["learner"]["default_policy"]
        assert np.isfinite(stats["mean_kl_loss"]) and stats["cur_kl_coeff"] > 0
        assert stats["num_target_updates"] > 0


def test_appo_epochs_in_update_make_every_pass_inside_one_update():
    """epochs_in_update (RLlib's new-stack Learner): the num_epochs passes over a batch are
    one update, so one policy version, one target sync and one broadcast per batch, and
    each batch counts its env steps once, as PPO's do; without it each pass is an update."""
    config = cartpole(APPOConfig, num_epochs=3, minibatch_size=100, epochs_in_update=True)
    with config.build() as algo:
        results = [algo.train() for _ in range(3)]
    stats = results[-1]["info"]["learner"]["default_policy"]
    assert stats["num_grad_updates"] == 12  # 3 passes over 400 env steps in minibatches of 100
    trained = results[-1]["num_env_steps_trained"]
    updates = sum(r["num_learner_updates"] for r in results)
    assert trained == 400 * updates <= results[-1]["num_env_steps_sampled"]
    assert np.isfinite(stats["entropy"]) and np.isfinite(stats["vf_explained_var"])


def test_data_parallel_learners_hold_identical_weights_after_every_update():
    config = (cartpole(train_batch_size=800, opt_type="rmsprop")
              .learners(num_learners=2, num_gpus_per_learner=1)
              .resources(_fake_gpus=True))  # the GPU configuration, on the CPU
    with config.build() as algo:
        for _ in range(3):
            result = algo.train()
        first, second = ({v: d for v, d in algo.mesh.run(learner.call("weight_digests"))}
                         for learner in algo.mesh.learners)
    common = sorted(set(first) & set(second))
    assert len(common) >= 5, (len(first), len(second))
    assert [first[v] for v in common] == [second[v] for v in common]
    assert len({first[v] for v in common}) == len(common)  # the weights did change
    assert result["num_learner_updates"] > 0


def test_killed_runner_and_aggregator_are_replaced_and_training_continues():
    config = cartpole().learners(num_aggregation_workers=1)
    with config.build() as algo:
        algo.train()
        runner_pid = algo.env_runners.foreach_env_runner("pid")[0]
        aggregator_pid = algo.mesh.run(algo.mesh.aggregators[0].call("pid"))
        os.kill(runner_pid, signal.SIGKILL)
        os.kill(aggregator_pid, signal.SIGKILL)
        results = [algo.train() for _ in range(6)]
        assert results[-1]["num_env_runner_restarts"] >= 1
        assert results[-1]["num_aggregator_restarts"] >= 1
        assert results[-1]["num_healthy_env_runners"] == 2
        assert algo.env_runners.foreach_env_runner("pid")[0] != runner_pid
        late = results[-2:]
        assert all(r["num_learner_updates"] > 0 for r in late)
        assert all(r["aggregators"] and r["aggregators"][0]["num_batches"] > 0 for r in late)


def test_a_dead_learner_stops_the_run_and_names_the_checkpoint(tmp_path):
    config = cartpole(runners=1).learners(num_learners=1)
    with config.build() as algo:
        algo.train()
        path = algo.save(tmp_path / "ckpt")
        os.kill(algo.mesh.run(algo.mesh.learners[0].call("pid")), signal.SIGKILL)
        with pytest.raises(LearnerFailed) as failed:
            for _ in range(20):
                algo.train()
    message = str(failed.value)
    assert "learner-0 died" in message and path in message and "--resume" in message


def test_no_batch_in_time_is_a_clear_error():
    config = (cartpole(runners=1, learner_queue_timeout=2.0)
              .environment("tests.integration.envs_for_tests:make_count_env",
                           env_config={"step_sleep_s": 0.2})
              .env_runners(rollout_fragment_length=100))
    with config.build() as algo:
        with pytest.raises(LearnerFailed, match="learner_queue_timeout=2.0 s"):
            for _ in range(5):
                algo.train()


def test_config_checks_as_rllib(caplog):
    with pytest.raises(ConfigError, match="num_aggregation_workers"):
        cartpole(runners=2).learners(num_aggregation_workers=3).validate()
    with pytest.raises(ConfigError, match="_separate_vf_optimizer"):
        ImpalaConfig().training(_separate_vf_optimizer=True).validate()
    with pytest.raises(ConfigError, match="did you mean 'vtrace_drop_last_ts'"):
        ImpalaConfig.from_dict({"vtrace_drop_last_step": True})
    warnings = cartpole(runners=3).learners(num_aggregation_workers=2).warnings()
    assert len(warnings) == 1 and "1 or fewer" in warnings[0]
    assert not cartpole(runners=4).learners(num_aggregation_workers=2).warnings()


def test_cli_resume_goes_on_from_the_newest_checkpoint(tmp_path):
    local = tmp_path / "results"
    base = [*RLMESH, "train", "--run", "IMPALA", "--env", "CartPole-v1", "--local-dir",
            str(local), "--experiment-name", "resume-test", "--checkpoint-freq", "1",
            "--config", json.dumps({"min_time_s_per_reporting": 0.3, "num_env_runners": 1,
                                    "num_envs_per_env_runner": 2})]
    first = subprocess.run([*base, "--stop", '{"training_iteration": 2}'],
                           capture_output=True, text=True, timeout=180)
    assert first.returncode == 0, first.stdout + first.stderr
    second = subprocess.run([*base, "--resume", "--stop", '{"training_iteration": 4}'],
                            capture_output=True, text=True, timeout=180)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "resuming from" in second.stdout and "checkpoint_000002" in second.stdout
    (trial,) = (local / "resume-test").iterdir()
    results = [json.loads(line) for line in (trial / "result.json").read_text().splitlines()]
    assert [r["training_iteration"] for r in results] == [1, 2, 3, 4]
    assert results[2]["timesteps_total"] > results[1]["timesteps_total"]
    rows = (trial / "progress.csv").read_text().splitlines()
    assert len(rows) == 5 and rows[0].startswith(rows[0].split(",")[0])
    none = subprocess.run([*RLMESH, "train", "--run", "APPO", "--env", "CartPole-v1",
                           "--local-dir", str(local), "--resume"],
                          capture_output=True, text=True, timeout=120)
    assert none.returncode == 2 and "no checkpoint of APPO" in none.stderr


def test_an_update_counts_in_the_report_the_driver_waited_for(monkeypatch):
    """An asynchronous iteration waits for ``updates_reported`` > 0, then reads
    ``pop_metrics``: the update must be in that report with its env steps. The learner counts
    ``num_updates`` as the gradient step ends, before the statistics reach the report (the
    source's ``trained`` runs between; slowed here to hold the gap open), so waiting on
    ``num_updates`` could read an iteration with nothing trained (CI saw 0 under load)."""
    import asyncio
    import threading
    import time

    import uvloop

    from rlmesh.roles.learner_input import StreamSource
    from rlmesh.runtime import Job
    from tests.benchmarks.impala_actors import cartpole_fragment

    in_trained = threading.Event()
    trained = StreamSource.trained

    def slow_trained(self, batch, stats):
        in_trained.set()
        time.sleep(1.0)
        return trained(self, batch, stats)

    monkeypatch.setattr(StreamSource, "trained", slow_trained)
    cfg = cartpole(train_batch_size=400)

    async def main():
        async with Job("inproc") as job:
            _, learner, _ = await inproc_learner(job, cfg)
            # 50 x 8 steps: a batch of 400, one update (more would wait behind the slow one)
            await learner.call("add_fragment", cartpole_fragment(seed=0))
            for _ in range(600):
                if in_trained.is_set():
                    break
                await asyncio.sleep(0.01)
            in_the_gap = (await learner.call("num_updates"),
                          await learner.call("updates_reported"))
            for _ in range(600):
                if await learner.call("updates_reported") > 0:
                    break
                await asyncio.sleep(0.02)
            return in_the_gap, await learner.call("pop_metrics"), \
                await learner.call("updates_reported")

    (stepped, reported), metrics, after = uvloop.run(main())
    assert (stepped, reported) == (1, 0)  # the gradient step done, its statistics not yet
    assert metrics["num_updates"] == 1 and metrics["num_env_steps_trained"] == 400
    assert metrics["stats"]["default_policy"]["policy_loss"] == metrics["stats"][
        "default_policy"]["policy_loss"]  # a number, not NaN
    assert after == 0  # popped: the next iteration waits for a new update


def test_the_last_update_is_published_when_the_publisher_was_busy_at_it(monkeypatch):
    """A due snapshot is skipped while another is on its way (copying the weights every
    update cost APEX ~6% of its updates); once that send ends, the version the model still
    holds goes out. The param server here takes 0.3 s a set, so ten quick updates each meet
    a busy publisher: before, the last version stayed unpublished when no update followed."""
    import asyncio

    import uvloop

    from rlmesh.runtime import Job
    from tests.benchmarks.impala_actors import cartpole_fragment
    from tests.integration.envs_for_tests import RecordingParamServer

    set_weights = RecordingParamServer.set_weights

    async def slow_set_weights(self, version, weights):
        await asyncio.sleep(0.3)
        await set_weights(self, version, weights)

    monkeypatch.setattr(RecordingParamServer, "set_weights", slow_set_weights)
    cfg = cartpole(broadcast_interval=1, train_batch_size=400)

    async def main():
        async with Job("inproc") as job:
            ps, learner, first = await inproc_learner(job, cfg)
            for i in range(10):
                await learner.call("add_fragment", cartpole_fragment(seed=i))
            for _ in range(600):
                if await learner.call("num_updates") >= 10:
                    break
                await asyncio.sleep(0.05)
            for _ in range(100):
                versions = await ps.call("versions")
                if versions[-1] == first + 10:
                    break
                await asyncio.sleep(0.05)
            return first, versions

    first, versions = uvloop.run(main())
    assert versions[-1] == first + 10, versions
    assert len(versions) < 11  # some were skipped: the busy publisher was met
