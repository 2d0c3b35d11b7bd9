"""PPO end to end through the Python API: it learns, checkpoints round-trip, a killed env
runner is replaced, and nothing is left running."""

from __future__ import annotations

import math
import os
import signal
import threading

import numpy as np
import psutil
import pytest

from rlmesh.algorithms import Algorithm, ConfigError, PPOConfig


def cartpole_config(**training) -> PPOConfig:
    return (PPOConfig()
            .environment("CartPole-v1")
            .env_runners(num_env_runners=2, num_envs_per_env_runner=4)
            .training(lr=3e-4, train_batch_size=2000, minibatch_size=256, num_epochs=10,
                      clip_param=0.2, entropy_coeff=0.0, vf_loss_coeff=0.5,
                      model={"fcnet_hiddens": [64, 64]}, **{"lambda": 0.95}, **training)
            .debugging(seed=1))


def test_ppo_learns_cartpole_and_reports_honest_counters():
    with cartpole_config(use_kl_loss=True).build() as algo:  # cur_kl_coeff reported with it
        best = -math.inf
        for _ in range(40):
            result = algo.train()
            best = max(best, result["episode_reward_mean"])
            if best >= 150:
                break
        assert best >= 150, f"PPO did not learn CartPole: best mean reward {best}"
        assert result["timesteps_total"] >= 2000 * result["training_iteration"]
        assert result["num_env_steps_trained"] == result["timesteps_total"]  # on-policy: all used
        stats = result["info"]["learner"]["default_policy"]
        for key in ("policy_loss", "vf_loss", "entropy", "mean_kl_loss", "cur_lr", "cur_kl_coeff"):
            assert np.isfinite(stats[key]), key
        assert stats["cur_lr"] == pytest.approx(3e-4)
        assert result["num_env_steps_sampled_throughput_per_sec"] > 0
        assert result["episodes_this_iter"] > 0 and result["num_healthy_env_runners"] == 2
        assert result["policy_lag_max"] == 0  # sampled with the weights it learns from


def test_sample_async_samples_during_the_update_learns_and_restore_drops_the_batch_ahead(
        tmp_path):
    config = cartpole_config().env_runners(sample_async=True)
    with config.build() as algo:
        results = [algo.train()]
        while max(r["episode_reward_mean"] for r in results) < 150:
            assert len(results) < 40, "PPO with sample_async did not learn CartPole"
            results.append(algo.train())
        # The first batch had nothing sampled ahead of it; each later one was sampled
        # while the update before it ran, so with the weights from before that update.
        assert results[0]["policy_lag_max"] == 0
        later = [r["policy_lag_max"] for r in results[1:]]
        assert set(later) <= {0, 1} and later.count(1) >= len(later) / 2, later
        last = results[-1]
        assert last["num_env_steps_trained"] == last["timesteps_total"]  # batch ahead: uncounted
        path = algo.save(tmp_path / "ckpt")
        algo.restore(path)  # the batch sampling ahead acts with weights restore replaces
        after = algo.train()
        assert after["policy_lag_max"] == 0
        assert after["timesteps_total"] == last["timesteps_total"] + after[
            "num_env_steps_sampled_this_iter"]


def test_checkpoint_round_trip_gives_the_same_actions_and_training_goes_on(tmp_path):
    config = cartpole_config().env_runners(num_env_runners=1)
    obs = np.random.default_rng(0).normal(size=(20, 4)).astype(np.float32)
    with config.build() as algo:
        algo.train()
        algo.train()
        actions = [algo.compute_single_action(o) for o in obs]
        path = algo.save(tmp_path / "ckpt")
        weights = algo.get_policy().get_weights()
    assert os.path.isfile(os.path.join(path, "rlmesh_checkpoint.msgpack"))
    with Algorithm.from_checkpoint(path) as restored:
        assert restored.iteration == 2
        assert [restored.compute_single_action(o) for o in obs] == actions
        for k, v in restored.get_policy().get_weights().items():
            np.testing.assert_array_equal(v, weights[k])
        result = restored.train()
        assert result["training_iteration"] == 3
        assert result["timesteps_total"] > 4000


def test_a_killed_env_runner_is_replaced_and_training_continues():
    config = cartpole_config().env_runners(num_env_runners=2).training(train_batch_size=1000)
    with config.build() as algo:
        algo.train()
        pids = algo.env_runners.foreach_env_runner("pid")
        os.kill(pids[0], signal.SIGKILL)
        # The other runner samples on meanwhile; train until the killed one is back.
        results = [algo.train()]
        while results[-1]["num_env_runner_restarts"] < 1:
            assert len(results) < 60, "the killed runner never came back"
            results.append(algo.train())
        assert results[-1]["num_healthy_env_runners"] == 2
        new_pids = algo.env_runners.foreach_env_runner("pid")
        assert new_pids[0] != pids[0] and new_pids[1] == pids[1]


def test_runs_built_and_stopped_in_one_process_leave_no_descriptors_or_threads():
    """A user's loop (a sweep's trials on threads, a notebook) builds run after run: each
    run's event loop is closed at stop, with its descriptors (a stopped uvloop left open
    kept five: epoll, io_uring, eventfd, two pipes), and its thread ends."""
    me = psutil.Process()
    config = cartpole_config().env_runners(num_env_runners=1, num_envs_per_env_runner=1) \
        .training(train_batch_size=64, minibatch_size=32, num_epochs=1)
    counts = []
    for _ in range(3):
        with config.build() as algo:
            algo.train()
        counts.append((me.num_fds(), threading.active_count()))
    assert counts[2] == counts[1] == counts[0], counts
    assert not [t for t in threading.enumerate() if t.name == "rlmesh.driver-loop"]
    with pytest.raises(RuntimeError, match="closed"):  # not a call that waits forever
        algo.mesh.run(algo.mesh.runners[0].call("pid"))


@pytest.mark.parametrize("squash", [False, True])
def test_box_actions_clipped_or_squashed_and_local_sampling(squash):
    config = (PPOConfig().environment("Pendulum-v1")
              .env_runners(num_env_runners=0, num_envs_per_env_runner=2)
              .training(train_batch_size=400, minibatch_size=100, num_epochs=2,
                        model={"fcnet_hiddens": [32], "squash_actions": squash}))
    with config.build() as algo:
        result = algo.train()
        assert result["timesteps_total"] >= 400
        stats = result["info"]["learner"]["default_policy"]
        # Squashed: a sampled entropy estimate (no closed form), finite all the same.
        assert np.isfinite(stats["entropy"]) and np.isfinite(stats["policy_loss"])
        for explore in (False, True):
            action = algo.compute_single_action(np.zeros(3, dtype=np.float32), explore=explore)
            assert action.shape == (1,) and -2.0 <= action[0] <= 2.0


def test_config_errors_speak_to_the_user():
    with pytest.raises(ConfigError, match="did you mean 'lambda'"):
        PPOConfig.from_dict({"lamda": 0.9})
    with pytest.raises(ValueError, match="CartPole"):
        PPOConfig().environment("CartPol-v1").build()


def test_callbacks_custom_metrics_and_the_curriculum_api():
    from tests.integration.envs_for_tests import EpisodeCallbacks, phase_of

    config = (PPOConfig()
              .environment("tests.integration.envs_for_tests:make_count_env",
                           env_config={"terminate_at": 5})
              .env_runners(num_env_runners=2, num_envs_per_env_runner=2)
              .training(train_batch_size=200, minibatch_size=50, num_epochs=1)
              .callbacks(EpisodeCallbacks))
    with config.build() as algo:
        result = algo.train()
        metrics = result["custom_metrics"]
        assert metrics["steps_seen_mean"] == metrics["steps_seen_min"] == 5.0
        assert metrics["env_index_min"] == 0 and metrics["env_index_max"] == 1
        # The curriculum example: set a phase on every env of every runner.
        assert algo.env_runners.foreach_env("set_phase", 3) == [3, 3, 3, 3]
        assert algo.env_runners.foreach_env(phase_of, 1) == [4, 4, 4, 4]
        # a lambda reaches the envs too, on this machine (the spawn channel)
        assert algo.env_runners.foreach_env(lambda env: env.phase) == [3, 3, 3, 3]


def test_ppo_with_two_data_parallel_learners_learns_with_identical_weights():
    """PPO on the one learner actor IMPALA uses: two ranks, each a shard of every train
    batch and the same number of minibatches, gradients all-reduced (gloo)."""
    config = cartpole_config().training(minibatch_size=250, num_epochs=4).learners(num_learners=2)
    with config.build() as algo:
        results = [algo.train() for _ in range(4)]
        first, second = ({v: d for v, d in algo.mesh.run(learner.call("weight_digests"))}
                         for learner in algo.mesh.learners)
        pids = {learner_pid for learner_pid in algo.learner_group.foreach_learner("pid")}
    assert len(pids) == 2 and os.getpid() not in pids  # two learner processes
    assert sorted(first) == sorted(second) == [1, 2, 3, 4]  # one digest per update
    assert [first[v] for v in sorted(first)] == [second[v] for v in sorted(second)]
    assert len(set(first.values())) == 4  # and the weights moved each update
    stats = results[-1]["info"]["learner"]["default_policy"]
    # 2000 samples over two ranks, minibatches of <= 250: every rank 4 steps an epoch.
    assert stats["num_grad_updates"] == 4 * 4
    assert results[-1]["num_env_steps_trained"] == results[-1]["timesteps_total"]
    assert results[-1]["episode_reward_mean"] > results[0]["episode_reward_mean"]
