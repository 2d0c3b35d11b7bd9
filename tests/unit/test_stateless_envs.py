"""rlmesh.env.stateless: CartPole and Pendulum with the velocities left out, step for step
the gymnasium env underneath, made by import path as a user names them."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlmesh.env.stateless import StatelessCartPole, StatelessPendulum
from rlmesh.env.registry import make_env


@pytest.mark.parametrize("cls,env_id,kept", [(StatelessCartPole, "CartPole-v1", [0, 2]),
                                             (StatelessPendulum, "Pendulum-v1", [0, 1])])
def test_observations_are_the_envs_without_its_velocities(cls, env_id, kept):
    env, full = cls(), gym.make(env_id)
    assert env.observation_space.shape == (len(kept),)
    obs, _ = env.reset(seed=3)
    full_obs, _ = full.reset(seed=3)
    np.testing.assert_allclose(obs, full_obs[kept])
    for _ in range(20):
        action = full.action_space.sample()
        obs, reward, terminated, truncated, _ = env.step(action)
        full_obs, full_reward, full_terminated, full_truncated, _ = full.step(action)
        np.testing.assert_allclose(obs, full_obs[kept])
        assert env.observation_space.contains(obs) and obs.dtype == np.float32
        assert (reward, terminated, truncated) == (full_reward, full_terminated, full_truncated)
        if terminated or truncated:
            break


def test_made_by_import_path_with_env_config_for_gymnasium():
    env = make_env("rlmesh.env.stateless:StatelessPendulum", {"max_episode_steps": 7})
    env.reset(seed=0)
    steps = 0
    while True:
        steps += 1
        if env.step(env.action_space.sample())[3]:
            break
    assert steps == 7
