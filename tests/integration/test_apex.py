"""APEX end to end with real processes: 3 runners with their own epsilons stream into 2
replay shards, the learner actor (in the driver, or in a process of its own) samples them;
it learns CartPole, a killed shard is restarted empty and training goes on, APEX_DDPG runs
on the same plumbing, and the wrong action space is refused in one line."""

from __future__ import annotations

import math
import os
import signal
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from rlmesh.algorithms.apex import ApexDDPGConfig, ApexDQNConfig
from rlmesh.driver import checkpoints
from rlmesh.driver.algorithm_registry import get_config_class
from rlmesh.config.base import ConfigError


def cartpole_config(**training) -> ApexDQNConfig:
    # tuned_examples/cartpole-apex.yaml's settings, with a smaller buffer.
    return (ApexDQNConfig()
            .environment("CartPole-v1")
            .env_runners(num_env_runners=3, rollout_fragment_length=50)
            .training(**{"num_replay_buffer_shards": 2, "train_batch_size": 64, "lr": 1e-3,
                         "n_step": 3, "training_intensity": 16,
                         "num_steps_sampled_before_learning_starts": 1000,
                         "target_network_update_freq": 1000, "hiddens": [],
                         "replay_buffer_config": {"capacity": 50_000},
                         "model": {"fcnet_hiddens": [64, 64]}, **training})
            .reporting(min_sample_timesteps_per_iteration=2000)
            .debugging(seed=0))


# ~15k env steps and ~4k gradient steps: ~40 s on 2 cores shared with other runs.
@pytest.mark.timeout(300)
def test_apex_learns_cartpole_with_3_runners_and_2_shards():
    with cartpole_config().build() as algo:
        assert [s.name for s in algo.mesh.shards] == ["replay_shard-0", "replay_shard-1"]
        best = -math.inf
        for _ in range(30):
            result = algo.train()
            best = max(best, result["episode_reward_mean"])
            if best >= 100:  # random play: ~22
                break
        assert best >= 100, f"APEX did not learn CartPole: best mean reward {best}"
        # Both shards took transitions and served the learner, and the learner sent
        # priorities back to each.
        shards = {s["index"]: s for s in result["replay_shards"]}
        assert set(shards) == {0, 1}
        for s in shards.values():
            assert s["num_added"] > 0 and s["num_samples"] > 0 and s["num_priority_updates"] > 0
            # Worker-side prioritization: most new transitions came with the runner's TD error.
            assert s["num_runner_priorities"] > 0.5 * s["num_added"]
        assert result["replay_buffer_num_added"] >= sum(s["num_added"] for s in shards.values())
        # training_intensity 16: the learner trained ~16 samples per env step sampled.
        learned = result["timesteps_total"] - 1000
        assert result["num_env_steps_trained"] <= 16 * result["timesteps_total"]
        assert result["num_env_steps_trained"] >= 0.5 * 16 * learned
        assert len(result["episode_reward_mean_by_runner"]) == 3
        assert result["num_replay_shard_restarts"] == 0


def test_a_killed_replay_shard_is_restarted_empty_and_training_goes_on():
    config = cartpole_config(num_steps_sampled_before_learning_starts=500)
    with config.build() as algo:
        first = algo.train()
        assert first["num_learner_updates"] > 0
        shard = algo.mesh.shards[1]
        old_pid = algo.mesh.run(shard.call("pid"))
        before = {s["index"]: s for s in first["replay_shards"]}[1]
        os.kill(old_pid, signal.SIGKILL)
        deadline = time.monotonic() + 120
        results = []
        while time.monotonic() < deadline:
            results.append(algo.train())
            if results[-1]["num_replay_shard_restarts"] >= 1 and len(results) >= 3:
                break
        last = results[-1]
        assert last["num_replay_shard_restarts"] == 1
        assert algo.mesh.run(shard.call("pid")) != old_pid
        after = {s["index"]: s for s in last["replay_shards"]}[1]
        assert after["incarnation"] != before["incarnation"]  # a new, empty buffer
        # Its runner streams into it again and the learner samples it again.
        assert after["num_fragments"] > 0 and after["num_samples"] > 0
        assert all(r["num_learner_updates"] > 0 for r in results[-2:])
        assert last["timesteps_total"] > first["timesteps_total"]
        # The transitions added before the kill still count.
        assert last["replay_buffer_num_added"] > before["num_added"] + after["num_added"]


@pytest.mark.timeout(300)
def test_a_learner_process_samples_two_shards_trains_and_checkpoints(tmp_path):
    config = cartpole_config(num_steps_sampled_before_learning_starts=500).learners(
        num_learners=1)
    with config.build() as algo:
        learner = spawned("learner-0")
        assert learner is not None and learner.pid != os.getpid()
        assert spawned("replay_shard-0") and spawned("replay_shard-1")
        best, results = -math.inf, []
        for _ in range(20):
            results.append(algo.train())
            best = max(best, results[-1]["episode_reward_mean"])
            if best >= 50 and len(results) >= 3:  # random play: ~22
                break
        assert best >= 50, f"APEX with a learner process did not learn: best {best}"
        last = results[-1]
        # The learner process sampled both shards on its credits and sent each its
        # batches' TD errors (worker-side priorities from the runners besides).
        for s in last["replay_shards"]:
            assert s["num_samples"] > 0 and s["num_priority_updates"] > 0
        assert last["num_stale_priority_updates"] == 0
        assert all(r["num_learner_updates"] > 0 for r in results[-2:])
        learned = last["timesteps_total"] - 500
        assert 0.5 * 16 * learned <= algo.num_env_steps_trained <= 16 * last["timesteps_total"]
        # Weights reach the driver's copy (compute_single_action) from the learner process.
        assert algo.compute_single_action(np.zeros(4, np.float32)) in (0, 1)
        path = algo.save(tmp_path / "ckpt")  # while the learner process trains on
    saved = checkpoints.read(Path(path))[1]["policies"]["default_policy"]["model"]
    # A run that does not train (its learning never starts) holds what was saved.
    # (A capacity that holds the learning starts: a smaller one is refused at build.)
    idle = cartpole_config(num_steps_sampled_before_learning_starts=10**6,
                           replay_buffer_config={"capacity": 10**6}).learners(num_learners=1)
    with idle.build() as again:
        again.restore(path)
        restored = again.get_weights()["default_policy"]
        assert {k for k in restored if not k.startswith("_")} == set(saved)
        assert all(np.array_equal(saved[k].numpy(), restored[k]) for k in saved)
        assert again.train()["training_iteration"] == last["training_iteration"] + 1


def spawned(name: str):
    """This test's child process serving actor ``name`` (its spec file names it), or None."""
    for p in psutil.Process().children(recursive=True):
        try:
            if any(a.endswith(f"{name}.spec") for a in p.cmdline()):
                return p
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return None


def test_apex_ddpg_trains_on_pendulum_through_the_shards(tmp_path):
    config = (ApexDDPGConfig().environment("Pendulum-v1")
              .env_runners(num_env_runners=2, rollout_fragment_length=50)
              .training(num_replay_buffer_shards=2, train_batch_size=64, training_intensity=4,
                        num_steps_sampled_before_learning_starts=400, tau=0.005,
                        target_network_update_freq=0, actor_hiddens=[32], critic_hiddens=[32],
                        replay_buffer_config={"capacity": 10_000})
              .reporting(min_sample_timesteps_per_iteration=500).debugging(seed=0))
    with config.build() as algo:
        for _ in range(3):
            result = algo.train()
        # A checkpoint mid-run (the learner actor hands its state over between two
        # updates) restores into a new run.
        path = algo.save(tmp_path / "ckpt")
    with config.build() as again:
        again.restore(path)
        assert (again.iteration, again.timesteps_total) == (3, result["timesteps_total"])
        assert again.train()["training_iteration"] == 4
    stats = result["info"]["learner"]["default_policy"]
    assert result["num_learner_updates"] > 0 and math.isfinite(stats["critic_loss"])
    assert all(s["num_priority_updates"] > 0 for s in result["replay_shards"])


def test_registered_names_and_wrong_spaces():
    assert get_config_class("APEX") is ApexDQNConfig
    assert get_config_class("apex_ddpg") is ApexDDPGConfig
    with pytest.raises(ConfigError, match="DQN needs a Discrete action space"):
        ApexDQNConfig().environment("Pendulum-v1").build()
    with pytest.raises(ConfigError, match="APEX_DDPG needs a Box"):
        ApexDDPGConfig().environment("CartPole-v1").build()
    with pytest.raises(ConfigError, match="num_env_runners"):
        ApexDQNConfig().env_runners(num_env_runners=0).validate()
    with pytest.raises(ConfigError, match="num_replay_buffer_shards: .* at most 2"):
        ApexDQNConfig().training(num_replay_buffer_shards=3).validate()
