"""Held exploration noise (``noise_hold_steps``) on real Pendulum envs: a Gaussian policy's
standard-normal draws are kept for k steps per env and redrawn when an episode starts, each
action is still ``mean + std * eps`` with the logp of the policy's own Gaussian, and what
cannot hold noise (a user's policy, a multi-agent runner, central inference, a policy
server) is refused in one line."""

from __future__ import annotations

import asyncio

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmesh.algorithms.impala_config import ImpalaConfig
from rlmesh.algorithms.ppo import PPOConfig
from rlmesh.env.gym_vector import gym_vector_maker
from rlmesh.policy.numpy_mlp import NumpyMLPPolicy
from rlmesh.policy.policy import Policy
from rlmesh.policy.torch_policy import TorchPolicy
from rlmesh.rl.distributions import DiagGaussian, SquashedGaussian
from rlmesh.roles.env_sampler import EnvSampler
from rlmesh.roles.held_noise import HeldNoise
from rlmesh.roles.runner_policy import takes_held_noise
from rlmesh.roles.vector_sampler import VectorEnvSampler, VectorSamplerError


def pendulum(episode_steps=200):
    return gym.make("Pendulum-v1", max_episode_steps=episode_steps)


def config(**kw):
    return ImpalaConfig().environment("Pendulum-v1").training(
        model={"fcnet_hiddens": [16]}).env_runners(**kw)


def eps_of(frag):
    """The standard-normal draws behind each stored action, [T, B, d]: (a - mean) / std,
    from the fragment's own distribution inputs."""
    mean, log_std = np.split(frag["action_dist_inputs"], 2, axis=-1)
    return (frag["actions"].reshape(mean.shape) - mean) / np.exp(log_std)


def gaussian_logp(frag):
    mean, log_std = np.split(frag["action_dist_inputs"].astype(np.float64), 2, axis=-1)
    z = (frag["actions"].reshape(mean.shape) - mean) / np.exp(log_std)
    return (-0.5 * z ** 2 - log_std - 0.5 * np.log(2 * np.pi)).sum(-1)


def env_sampler(hold, num_envs=3, episode_steps=200, seed=0):
    cfg = config(noise_hold_steps=hold)
    s = EnvSampler(lambda i: pendulum(episode_steps), num_envs, seeds=[seed + i for i in range(num_envs)],
                   noise_hold=hold)
    s.policy = NumpyMLPPolicy(s.observation_space, s.action_space, cfg)
    return s


# --- HeldNoise itself ---

def test_a_draw_is_held_for_its_steps_then_redrawn():
    noise = HeldNoise(num_envs=2, dim=1, hold=3, seed=0)
    rows = np.stack([noise.draws(slice(None)).copy() for _ in range(7)])  # [7, 2, 1]
    for b in range(2):
        assert rows[0, b] == rows[1, b] == rows[2, b]
        assert rows[3, b] == rows[4, b] == rows[5, b] != rows[2, b]
        assert rows[6, b] != rows[5, b]
    assert rows[0, 0] != rows[0, 1]  # each env its own draw


def test_a_restart_redraws_at_the_next_step_only_for_its_env():
    noise = HeldNoise(num_envs=2, dim=2, hold=100, seed=1)
    first = noise.draws([0, 1]).copy()
    noise.restart(1)
    second = noise.draws([0, 1]).copy()
    np.testing.assert_array_equal(first[0], second[0])
    assert not np.array_equal(first[1], second[1])


def test_the_same_seed_gives_the_same_draws_and_no_hold_gives_no_noise_object():
    a, b = HeldNoise(3, 2, 4, seed=5), HeldNoise(3, 2, 4, seed=5)
    np.testing.assert_array_equal(a.draws(slice(None)), b.draws(slice(None)))
    assert HeldNoise.for_space(gym.spaces.Box(-1, 1, (2,)), 3, 1) is None
    assert HeldNoise.for_space(gym.spaces.Discrete(3), 3, 8) is None  # a softmax: nothing held
    assert HeldNoise.for_space(gym.spaces.Box(-1, 1, (2, 3)), 3, 8).noise.shape == (3, 6)


# --- the one-env-at-a-time sampler (a runner's default for a few envs) ---

@pytest.mark.parametrize("hold", [1, 4])
def test_env_sampler_actions_are_the_policys_gaussian_at_held_draws(hold):
    s = env_sampler(hold)
    frag = s.sample(16)
    eps = eps_of(frag)[..., 0]  # [16, 3]
    np.testing.assert_allclose(frag["action_logp"], gaussian_logp(frag), rtol=1e-5, atol=1e-5)
    same_as_before = np.isclose(eps[1:], eps[:-1], atol=1e-5)
    if hold == 1:
        assert not same_as_before.any()
    else:
        held = np.array([t % hold != 0 for t in range(1, 16)])  # rows whose draw is kept
        assert same_as_before[held].all()
        assert not same_as_before[~held].any()
        assert abs(eps.mean()) < 1.5 and 0.3 < eps.std() < 2.0  # standard normal draws


def test_a_recurrent_torch_policy_takes_the_held_draws_with_its_state():
    cfg = PPOConfig().training(model={"use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 4,
                                      "fcnet_hiddens": [8]})
    s = EnvSampler(lambda i: pendulum(), 2, seeds=[0, 1], noise_hold=4)
    s.policy = TorchPolicy(s.observation_space, s.action_space, cfg)
    frag = s.sample(8)
    assert "state_in_0" in frag  # the per-env inputs path
    eps = eps_of(frag)[..., 0]
    assert np.allclose(eps[0:4], eps[0], atol=1e-4) and np.allclose(eps[4:8], eps[4], atol=1e-4)
    assert not np.isclose(eps[3], eps[4], atol=1e-4).any()


def test_env_sampler_redraws_when_an_episode_starts():
    s = env_sampler(hold=1000, num_envs=2, episode_steps=5)
    frag = s.sample(15)
    eps = eps_of(frag)[..., 0]
    for b in range(2):
        for start in (0, 5, 10):
            assert np.allclose(eps[start:start + 5, b], eps[start, b], atol=1e-5)
        assert not np.isclose(eps[4, b], eps[5, b]) and not np.isclose(eps[9, b], eps[10, b])


def test_held_noise_does_not_touch_greedy_actions():
    s = env_sampler(hold=4)
    frag = s.sample(4, explore=False)
    np.testing.assert_allclose(eps_of(frag), 0, atol=1e-6)


# --- the vector sampler (gymnasium's vector envs) ---

def test_vector_sampler_holds_each_envs_draw():
    cfg = config(num_envs_per_env_runner=4, noise_hold_steps=3)
    cfg.env_config = {"vector": "sync"}
    s = VectorEnvSampler(gym_vector_maker(cfg, {}), 4, seed=0, noise_hold=3)
    s.policy = NumpyMLPPolicy(s.observation_space, s.action_space, cfg)
    try:
        frag = asyncio.run(s.sample(9))
    finally:
        s.close()
    eps = eps_of(frag)[..., 0]
    np.testing.assert_allclose(frag["action_logp"], gaussian_logp(frag), rtol=1e-5, atol=1e-5)
    for start in (0, 3, 6):
        assert np.allclose(eps[start:start + 3], eps[start], atol=1e-5)
    assert not np.isclose(eps[2], eps[3]).any() and not np.isclose(eps[5], eps[6]).any()
    assert len(set(np.round(eps[0], 5))) == 4  # four envs, four draws


def test_vector_sampler_refuses_held_noise_under_central_inference():
    cfg = config(num_envs_per_env_runner=2)
    cfg.env_config = {"vector": "sync"}
    with pytest.raises(VectorSamplerError, match="noise_hold_steps=8: the inference actor"):
        VectorEnvSampler(gym_vector_maker(cfg, {}), 2, noise_hold=8, act=lambda obs, explore: None)


# --- policies: which take the draws, and what they do with them ---

def test_torch_policy_acts_mean_plus_std_times_the_draws():
    cfg = PPOConfig().training(model={"fcnet_hiddens": [8]})
    env = pendulum()
    policy = TorchPolicy(env.observation_space, env.action_space, cfg)
    obs = np.stack([env.observation_space.sample() for _ in range(3)])
    draws = np.array([[0.5], [-1.0], [2.0]], np.float32)
    actions, _, extras = policy.compute_actions(obs, explore=True, noise=draws)
    mean, log_std = np.split(extras["action_dist_inputs"], 2, axis=-1)
    np.testing.assert_allclose(actions, mean + np.exp(log_std) * draws, rtol=1e-5, atol=1e-6)
    greedy, _, _ = policy.compute_actions(obs, explore=False, noise=draws)
    np.testing.assert_allclose(greedy, mean, rtol=1e-5, atol=1e-6)


def test_both_gaussians_sample_with_given_draws():
    inputs = torch.tensor([[0.2, -0.3, np.log(0.5), 0.0]])
    z = torch.tensor([[1.0, -2.0]])
    np.testing.assert_allclose(DiagGaussian(inputs).sample_with(z), [[0.7, -2.3]], rtol=1e-6)
    squashed = SquashedGaussian.with_bounds(np.array([-2.0, -2.0]), np.array([2.0, 2.0]))(inputs)
    np.testing.assert_allclose(squashed.sample_with(z), 2 * np.tanh([[0.7, -2.3]]), rtol=1e-6)


class OwnSampling(Policy):
    """A user's policy that draws its own actions."""

    def compute_actions(self, obs_batch, state_batches=None, prev_action_batch=None,
                        prev_reward_batch=None, explore=None, **kwargs):
        return np.zeros((len(obs_batch), 1), np.float32), [], {}


class OverridesCompute(NumpyMLPPolicy):
    def compute_actions(self, obs_batch, *args, **kwargs):
        return super().compute_actions(obs_batch, *args, **kwargs)


def test_only_rlmeshs_own_compute_actions_take_the_draws():
    env = pendulum()
    cfg = config()
    assert takes_held_noise(NumpyMLPPolicy(env.observation_space, env.action_space, cfg))
    assert takes_held_noise(TorchPolicy(env.observation_space, env.action_space, PPOConfig()))
    assert not takes_held_noise(OwnSampling(env.observation_space, env.action_space, cfg))
    assert not takes_held_noise(OverridesCompute(env.observation_space, env.action_space, cfg))


def test_a_users_policy_is_refused_in_one_line_before_any_step():
    s = EnvSampler(lambda i: pendulum(), 2, noise_hold=4)
    s.policy = OwnSampling(s.observation_space, s.action_space, config())
    with pytest.raises(ValueError) as err:
        s.sample(2)
    line = str(err.value)
    assert "\n" not in line and "noise_hold_steps=4: OwnSampling.compute_actions" in line
    assert s.counters["num_env_steps_sampled"] == 0


# --- configs ---

def test_config_checks_the_setting():
    assert config().noise_hold_steps == 1
    with pytest.raises(ValueError, match="noise_hold_steps"):
        config(noise_hold_steps=0).validate()
    with pytest.raises(ValueError, match="noise_hold_steps: a policy server's clients"):
        ImpalaConfig().environment(
            observation_space=gym.spaces.Box(-1, 1, (3,)),
            action_space=gym.spaces.Box(-1, 1, (1,))).env_runners(
            noise_hold_steps=8, policy_server_address="tcp://127.0.0.1:9900").validate()


def test_a_multi_agent_runner_refuses_held_noise_in_one_line():
    from types import SimpleNamespace

    from rlmesh.env.multi_agent_env import make_multi_agent
    from rlmesh.roles.runner_sampler import make_sampler

    cls = make_multi_agent("Pendulum-v1")
    runner = SimpleNamespace(config=config(noise_hold_steps=8), callbacks=None, _central_act=None)
    with pytest.raises(ValueError) as err:
        make_sampler(runner, lambda i: cls({"num_agents": 2}), {}, [0], False, False)
    assert "\n" not in str(err.value) and "noise_hold_steps=8: held noise" in str(err.value)
