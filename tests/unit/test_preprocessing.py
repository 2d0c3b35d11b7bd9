"""Runner-side preprocessing: framestack stacks the last k observations and restarts with
each episode, the policy's space is the stacked one; env_config {"atari": True} builds
ALE/Pong-v5 under gymnasium's Atari wrappers and an env runner samples from it."""

from __future__ import annotations

import asyncio

import gymnasium as gym
import numpy as np
import pytest

from rlmesh.algorithms.ppo import PPOConfig
from rlmesh.env.registry import env_registry, make_env
from rlmesh.preprocessing import FrameStack, framestack_size, stacked_space
from rlmesh.roles.specs import RunnerSpec
from rlmesh.roles.env_runner import EnvRunner
from tests.integration.envs_for_tests import CountEnv


def test_framestack_stacks_the_last_frames_and_restarts_each_episode():
    env = FrameStack(CountEnv({"terminate_at": 3}), 3)
    assert env.observation_space.shape == (6,)
    obs, _ = env.reset(seed=0)
    np.testing.assert_array_equal(obs[0::2], [0, 0, 0])  # the first frame, three times
    for step in (1, 2):
        obs, *_ = env.step(0)
    np.testing.assert_array_equal(obs[0::2], [0, 1, 2])
    _, _, terminated, _, _ = env.step(0)
    assert terminated
    obs, _ = env.reset()
    np.testing.assert_array_equal(obs[0::2], [0, 0, 0])  # nothing of the last episode


def test_stacked_space_of_images_and_options():
    gray = gym.spaces.Box(0, 255, (84, 84), np.uint8)
    assert stacked_space(gray, 4).shape == (84, 84, 4) and stacked_space(gray, 4).dtype == np.uint8
    assert stacked_space(gym.spaces.Box(0, 255, (10, 10, 3), np.uint8), 2).shape == (10, 10, 6)
    assert [framestack_size({"framestack": v}) for v in (True, False, 1, 3)] == [4, 1, 1, 3]
    with pytest.raises(ValueError, match="Box"):
        stacked_space(gym.spaces.Discrete(3), 2)


def test_a_runner_samples_stacked_observations_the_policy_declares():
    config = (PPOConfig().environment("CartPole-v1")
              .env_runners(num_envs_per_env_runner=2, rollout_fragment_length=5)
              .training(model={"fcnet_hiddens": [8], "framestack": 3}).debugging(seed=0))
    runner = EnvRunner(RunnerSpec(config.to_dict(), env_registry=env_registry(), param_server=None).to_data())
    fragment = asyncio.run(runner.sample())
    assert fragment["obs"].shape == (5, 2, 12) and fragment["next_obs"].shape == (2, 12)
    first = fragment["obs"][0, 0]
    np.testing.assert_array_equal(first[:4], first[8:])  # the reset frame, repeated


def test_atari_env_config_builds_and_steps_pong_through_an_env_runner():
    pytest.importorskip("ale_py")
    env = make_env("ALE/Pong-v5", {"atari": True})
    assert env.observation_space.shape == (84, 84, 4) and env.observation_space.dtype == np.uint8
    env.close()
    with pytest.raises(ValueError, match="unknown settings"):
        make_env("ALE/Pong-v5", {"atari": {"screen": 42}})
    config = (PPOConfig().environment("ALE/Pong-v5", env_config={"atari": {"screen_size": 42}})
              .env_runners(num_envs_per_env_runner=2, rollout_fragment_length=8)
              .training(model={"fcnet_hiddens": [8]}).debugging(seed=0))
    runner = EnvRunner(RunnerSpec(config.to_dict(), env_registry=env_registry(), param_server=None).to_data())
    fragment = asyncio.run(runner.sample())
    assert fragment["obs"].shape == (8, 2, 42, 42, 4) and fragment["obs"].dtype == np.uint8
    assert fragment["obs"][-1].any() and fragment["mask"].all()


def test_area_resize_averages_the_pixels_each_output_covers():
    from rlmesh.preprocessing import area_resize, area_weights

    frame = np.random.default_rng(0).integers(0, 256, (168, 160, 3)).astype(np.uint8)
    half = area_resize(frame, area_weights(168, 84), area_weights(160, 80))
    expected = frame.reshape(84, 2, 80, 2, 3).mean((1, 3))
    np.testing.assert_array_equal(half, np.rint(expected).astype(np.uint8))
    odd = area_resize(frame[..., 0], area_weights(168, 84), area_weights(160, 84))
    assert odd.shape == (84, 84) and abs(float(odd.mean()) - float(frame[..., 0].mean())) < 0.5
