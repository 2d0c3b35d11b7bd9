"""observation_filter="MeanStdFilter" end to end: RLlib's cartpole-ppo.yaml loads and learns,
every runner holds the same statistics after each sync, and checkpoints keep them for
compute_single_action, rollout's InferencePolicy and a restored run."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import gymnasium as gym
import numpy as np

from rlmesh.algorithms import Algorithm, PPOConfig
from rlmesh.driver.inference import InferencePolicy
from rlmesh.cli import train

RLLIB_YAML = Path(__file__).with_name("rllib_cartpole_ppo.yaml")


def assert_same_state(states, expected):
    for s in states:
        assert s["n"] == expected["n"]
        np.testing.assert_array_equal(s["mean"], expected["mean"])
        np.testing.assert_array_equal(s["m2"], expected["m2"])


def test_rllib_cartpole_ppo_yaml_learns_with_runners_in_sync():
    parser = argparse.ArgumentParser()
    train.add_arguments(parser)
    spec = train.resolve_spec(parser.parse_args(["-f", str(RLLIB_YAML), "--seed", "0"]))
    spec.config["num_env_runners"] = 2  # the yaml's 1, doubled: a sync has something to merge
    config = train.make_config(spec)
    assert config.observation_filter == "MeanStdFilter"
    with config.build() as algo:
        best, steps = -math.inf, 0
        while steps < 100_000 and best < 150:
            result = algo.train()
            best, steps = max(best, result["episode_reward_mean"]), result["timesteps_total"]
            expected = algo.obs_filter.get_state()
            # Every observation sampled is counted once (each runner resets 1 env per episode).
            assert expected["n"] >= steps
            assert_same_state(algo.env_runners.foreach_env_runner("get_filter_state"), expected)
        assert best >= 150, f"PPO with MeanStdFilter did not learn CartPole: best {best}"
        # The statistics are CartPole's: the pole's angle is small and centred.
        assert abs(expected["mean"][2]) < 0.05


def test_filter_survives_save_and_restore_and_rollout_applies_it(tmp_path):
    config = (PPOConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=2, num_envs_per_env_runner=2,
                           observation_filter="MeanStdFilter")
              .training(train_batch_size=400, minibatch_size=100, num_epochs=2)
              .debugging(seed=3))
    obs = np.random.default_rng(0).normal(size=(20, 4)).astype(np.float32)
    with config.build() as algo:
        algo.train()
        algo.train()
        state = algo.obs_filter.get_state()
        assert state["n"] >= 800
        actions = [algo.compute_single_action(o) for o in obs]
        path = algo.save(tmp_path / "ckpt")
        # The policy acts on the filtered observation, which is far from the raw one.
        filtered = [algo.obs_filter(o, update=False) for o in obs]
        assert min(np.abs(f - o).max() for f, o in zip(filtered, obs)) > 0.1
        policy = algo.get_policy()
        assert actions == [int(policy.compute_single_action(f, explore=False)[0]) for f in filtered]
    with Algorithm.from_checkpoint(path) as restored:
        assert_same_state([restored.obs_filter.get_state()], state)
        assert_same_state(restored.env_runners.foreach_env_runner("get_filter_state"), state)
        assert [restored.compute_single_action(o) for o in obs] == actions
        restored.train()
        assert restored.obs_filter.get_state()["n"] >= state["n"] + 400
    rollout = InferencePolicy.from_checkpoint(path)
    assert [rollout.compute_single_action(o) for o in obs] == actions


def test_policy_client_local_inference_applies_the_servers_filter():
    from rlmesh.client import PolicyClient
    from tests.integration.test_policy_client import runner_process

    mean = np.array([0.5, -1.0, 0.1, 2.0])
    state = {"n": 101, "mean": mean, "m2": np.full(4, 4.0 * 100)}  # std 2
    with runner_process(observation_filter="MeanStdFilter") as (run, runner, address):
        run(runner.call("set_filter_state", state))
        seen = []
        for mode in ("local", "remote"):
            with PolicyClient(address, inference_mode=mode) as client:
                env = gym.make("CartPole-v1")
                eid = client.start_episode()
                obs, _ = env.reset(seed=0)
                for _ in range(5):
                    seen.append(obs)
                    obs, reward, *_ = env.step(client.get_action(eid, obs))
                    client.log_returns(eid, reward)
                client.end_episode(eid, obs, truncated=True)
        fragment = run(runner.call("sample"))
        counted = run(runner.call("get_filter_updates"))
    # Local inference: the server's statistics exactly, as the client recorded the steps.
    local = ((np.array(seen[:5]) - mean) / 2).astype(np.float32)
    assert any(np.allclose(fragment["obs"][:5, b], local, atol=1e-6) for b in range(2))
    assert counted["n"] == 6  # remote inference counts what its clients send; local does not
