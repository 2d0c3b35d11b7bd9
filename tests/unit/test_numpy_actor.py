"""SAC's, DDPG's and TD3's numpy runner side against their torch policies on the same
weights: the deterministic actions to float tolerance, the stochastic ones with the same
standard normals (SAC, Box), in distribution (SAC, Discrete) or from the same seeded noise
(DDPG/TD3), in the actor's bounds; and runner_class choosing numpy only where it acts alike."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmesh.algorithms.ddpg import DDPGConfig, DDPGTorchPolicy
from rlmesh.algorithms.sac import SACConfig, SACTorchPolicy
from rlmesh.algorithms.td3 import TD3Config
from rlmesh.policy.numpy_actor import NumpyDDPGPolicy, NumpySACPolicy
from rlmesh.policy.policy_spec import PolicySpec, build_policy_from_data

OBS = gym.spaces.Box(-3.0, 3.0, (3,), np.float32)
PENDULUM_ACT = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
ASYMMETRIC = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 5.0], np.float32))
NET = {"fcnet_hiddens": [32, 32], "fcnet_activation": "tanh"}


def perturbed(policy, seed=0):
    """Random, not initial, weights (so the outputs are far from 0 and the squash bites)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in policy.model["actor"].parameters():
            p.add_(0.5 * torch.randn_like(p))
    return policy


def sac_pair(action_space, normalize=True, **runners):
    config = (SACConfig().training(policy_model_config=NET, q_model_config=NET)
              .environment(normalize_actions=normalize).env_runners(**runners))
    torch_policy = perturbed(SACTorchPolicy(OBS, action_space, config))
    numpy_policy = NumpySACPolicy(OBS, action_space, config)
    numpy_policy.set_weights(torch_policy.get_weights())
    return torch_policy, numpy_policy


def observations(n=64, seed=1):
    return np.random.default_rng(seed).uniform(-3, 3, (n, 3)).astype(np.float32)


@pytest.mark.parametrize("action_space, normalize", [
    (PENDULUM_ACT, True), (PENDULUM_ACT, False), (ASYMMETRIC, False)],
    ids=["unit-bounds", "box-bounds", "asymmetric-bounds"])
def test_sac_box_actions_equal_torchs_for_the_same_normals(action_space, normalize):
    torch_policy, numpy_policy = sac_pair(action_space, normalize)
    obs = observations()
    low, high = ((-1.0, 1.0) if normalize else (action_space.low, action_space.high))
    mode_t = torch_policy.compute_actions(obs, explore=False)[0]
    mode_n = numpy_policy.compute_actions(obs, explore=False)[0]
    np.testing.assert_allclose(mode_n, mode_t, atol=1e-5)
    torch.manual_seed(7)
    normals = torch.randn(len(obs), action_space.shape[0]).numpy()
    torch.manual_seed(7)  # the torch policy draws the same normals (randn_like of its mean)
    sample_t = torch_policy.compute_actions(obs, explore=True)[0]
    sample_n = numpy_policy.compute_actions(obs, explore=True, normals=normals)[0]
    np.testing.assert_allclose(sample_n, sample_t, atol=1e-5)
    assert sample_n.dtype == np.float32 and sample_n.shape == (len(obs), *action_space.shape)
    assert not np.allclose(sample_n, mode_n)  # the noise mattered
    assert np.all(sample_n >= low) and np.all(sample_n <= high)
    # saturated: near both bounds, as the perturbed actor's large outputs push them
    assert np.any(sample_n - low < 0.05 * (np.asarray(high) - low))


def test_sac_box_draws_follow_the_same_distribution_from_their_own_generator():
    torch_policy, numpy_policy = sac_pair(PENDULUM_ACT)
    obs = np.repeat(observations(1), 20_000, axis=0)
    numpy_policy.seed(0)
    ours = numpy_policy.compute_actions(obs, explore=True)[0].reshape(-1)
    torch.manual_seed(0)
    theirs = torch_policy.compute_actions(obs, explore=True)[0].reshape(-1)
    for q in (0.1, 0.5, 0.9):
        assert abs(np.quantile(ours, q) - np.quantile(theirs, q)) < 0.03, q


def test_discrete_sac_mode_is_torchs_and_draws_follow_its_probabilities():
    space = gym.spaces.Discrete(4)
    torch_policy, numpy_policy = sac_pair(space)
    obs = observations()
    np.testing.assert_array_equal(numpy_policy.compute_actions(obs, explore=False)[0],
                                  torch_policy.compute_actions(obs, explore=False)[0])
    one = np.repeat(observations(1, seed=3), 40_000, axis=0)
    with torch.no_grad():
        probs = torch.softmax(torch_policy.model["actor"](torch.as_tensor(one[:1])), -1)[0].numpy()
    assert probs.max() < 0.95  # a draw, not a near-certain action
    numpy_policy.seed(0)
    ours = numpy_policy.compute_actions(one, explore=True)[0]
    theirs = torch_policy.compute_actions(one, explore=True)[0]
    assert ours.dtype == np.int64
    np.testing.assert_allclose(np.bincount(ours, minlength=4) / len(one), probs, atol=0.01)
    np.testing.assert_allclose(np.bincount(theirs, minlength=4) / len(one), probs, atol=0.01)


@pytest.mark.parametrize("space", [PENDULUM_ACT, gym.spaces.Discrete(3)], ids=["box", "discrete"])
def test_sac_random_timesteps_are_the_same_uniform_actions_for_the_same_seed(space):
    torch_policy, numpy_policy = sac_pair(
        space, exploration_config={"type": "StochasticSampling", "random_timesteps": 10})
    torch_policy.seed(5)
    numpy_policy.seed(5)
    obs = observations(4)
    for _ in range(3):  # steps 0-11: all random (the third call starts before step 10)
        np.testing.assert_array_equal(numpy_policy.compute_actions(obs)[0],
                                      torch_policy.compute_actions(obs)[0])
    assert numpy_policy.timestep == torch_policy.timestep == 12


@pytest.mark.parametrize("make_config, exploration", [
    (DDPGConfig, {"type": "OrnsteinUhlenbeckNoise", "random_timesteps": 8}),
    (DDPGConfig, {"type": "GaussianNoise", "stddev": 0.3, "random_timesteps": 0}),
    (TD3Config, {"random_timesteps": 8})], ids=["ddpg-ou", "ddpg-gaussian", "td3"])
def test_ddpg_td3_actions_equal_torchs_with_the_same_noise(make_config, exploration):
    config = (make_config().training(actor_hiddens=[32, 32], critic_hiddens=[32, 32])
              .environment(normalize_actions=False).env_runners(exploration_config=exploration))
    torch_policy = perturbed(DDPGTorchPolicy(OBS, ASYMMETRIC, config))
    numpy_policy = NumpyDDPGPolicy(OBS, ASYMMETRIC, config)
    numpy_policy.set_weights(torch_policy.get_weights())
    obs = observations(16)
    np.testing.assert_allclose(numpy_policy.compute_actions(obs, explore=False)[0],
                               torch_policy.compute_actions(obs, explore=False)[0], atol=1e-5)
    torch_policy.seed(3)
    numpy_policy.seed(3)
    for _ in range(4):  # the random phase (if any), then the noisy actor, OU's state carried
        ours = numpy_policy.compute_actions(obs, explore=True)[0]
        np.testing.assert_allclose(ours, torch_policy.compute_actions(obs, explore=True)[0],
                                   atol=1e-5)
        assert np.all(ours >= ASYMMETRIC.low) and np.all(ours <= ASYMMETRIC.high)
    assert numpy_policy.noise.timestep == torch_policy.noise.timestep == 64


def test_weights_carry_the_runs_timestep_into_exploration():
    torch_policy, numpy_policy = sac_pair(
        PENDULUM_ACT, exploration_config={"type": "StochasticSampling", "random_timesteps": 100})
    torch_policy.global_timestep = 500
    numpy_policy.set_weights(torch_policy.get_weights())
    assert numpy_policy.timestep == 500  # past random_timesteps: acts with the actor
    obs = observations(8)
    torch.manual_seed(1)
    normals = torch.randn(8, 1).numpy()
    torch.manual_seed(1)
    torch_policy.on_timestep(500)
    np.testing.assert_allclose(numpy_policy.compute_actions(obs, normals=normals)[0],
                               torch_policy.compute_actions(obs)[0], atol=1e-5)


class OwnActing(SACTorchPolicy):
    """Acts its own way: runners must run this class, not the numpy path."""

    def compute_actions(self, obs_batch, *args, **kwargs):
        return super().compute_actions(obs_batch, *args, **kwargs)


def test_runner_class_is_numpy_only_for_the_default_actor_on_flat_observations():
    image = gym.spaces.Box(0, 255, (42, 42, 3), np.uint8)
    assert SACTorchPolicy.runner_class(SACConfig(), OBS, PENDULUM_ACT).endswith(":NumpySACPolicy")
    assert DDPGTorchPolicy.runner_class(TD3Config(), OBS, PENDULUM_ACT).endswith(":NumpyDDPGPolicy")
    assert SACTorchPolicy.runner_class(SACConfig(), image, PENDULUM_ACT).endswith(":SACTorchPolicy")
    assert OwnActing.runner_class(SACConfig(), OBS, PENDULUM_ACT).endswith(":OwnActing")


def test_a_runner_built_sac_policy_acts_without_importing_torch():
    code = ("import sys, numpy as np, gymnasium as gym\nfrom numpy import array, float32\n"
            "from rlmesh.algorithms.sac_config import SACConfig\n"
            "from rlmesh.policy.policy_spec import build_policy_from_data\n"
            f"data = {spec_data()!r}\n"
            "p = build_policy_from_data(data, SACConfig(), runner=True)\n"
            "a = p.compute_actions(np.zeros((2, 3), np.float32))[0]\n"
            "print(type(p).__name__, a.shape, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["NumpySACPolicy", "(2,", "1)", "False"], out.stdout


def spec_data():
    spec = PolicySpec().resolved(SACTorchPolicy, OBS, PENDULUM_ACT)
    data = spec.to_data(SACConfig())
    assert build_policy_from_data(data, SACConfig(), runner=True).__class__ is NumpySACPolicy
    return data
