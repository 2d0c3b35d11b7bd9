"""Noisy nets (rl/noisy.py) and DQN's Q network: factorised noise and its statistics, the
mean weights when greedy, gradients into sigma, the runners' numpy twin agreeing with torch,
no epsilon when noisy, and the Q network's torch-default initialisation."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmesh.algorithms.dqn import DQNConfig, DQNTorchPolicy, QModel
from rlmesh.policy.numpy_q import NumpyQNet, NumpyQPolicy
from rlmesh.rl.noisy import NoisyLinear

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ACT = gym.spaces.Discrete(3)
MODEL = {"fcnet_hiddens": [32, 32], "fcnet_activation": "relu"}


def test_noisy_linear_is_its_mean_in_eval_and_noisy_around_it_in_training():
    torch.manual_seed(0)
    layer = NoisyLinear(8, 5, sigma0=0.5)
    x = torch.randn(16, 8)
    mean = torch.nn.functional.linear(x, layer.weight_mu, layer.bias_mu)
    layer.eval()
    assert torch.equal(layer(x), mean)
    layer.train()
    with torch.no_grad():
        draws = torch.stack([layer(x) for _ in range(1000)])
    assert not torch.allclose(draws[0], draws[1])  # new noise on every forward
    # Zero-mean noise: the average output is the mean weights' output.
    assert torch.allclose(draws.mean(0), mean, atol=0.1)
    assert float(draws.std(0).mean()) > 0.1


def test_noise_is_factorised_one_outer_product_per_forward():
    torch.manual_seed(1)
    layer = NoisyLinear(6, 4)
    with torch.no_grad():
        layer.bias_sigma.zero_()
        eye = torch.eye(6)
        noise = (layer(eye) - torch.nn.functional.linear(eye, layer.weight_mu, layer.bias_mu))
    # Row j is sigma_w[:, j] * eps_out * eps_in[j]: noise / sigma is eps_in eps_out^T, rank 1.
    eps = (noise / layer.weight_sigma.T).detach().numpy()
    assert eps.shape == (6, 4)
    assert np.linalg.matrix_rank(eps, tol=1e-5) == 1


def test_gradients_reach_sigma_and_mu():
    layer = NoisyLinear(8, 3)
    layer(torch.randn(10, 8)).pow(2).sum().backward()
    for p in (layer.weight_mu, layer.weight_sigma, layer.bias_mu, layer.bias_sigma):
        assert p.grad is not None and float(p.grad.abs().sum()) > 0


def _weights(model: torch.nn.Module) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("noisy", [False, True])
@pytest.mark.parametrize("dueling,hiddens", [(False, []), (True, [16])])
def test_numpy_q_network_matches_torch_mean_weights(noisy, dueling, hiddens):
    torch.manual_seed(2)
    model = QModel(OBS, ACT.n, MODEL, hiddens, dueling, noisy=noisy).eval()
    net = NumpyQNet(OBS, {**MODEL})
    net.set_weights(_weights(model))
    obs = np.random.default_rng(0).uniform(-1, 1, (20, 4)).astype(np.float32)
    expected = model.q_values(torch.as_tensor(obs)).detach().numpy()
    np.testing.assert_allclose(net(obs), expected, rtol=1e-5, atol=1e-5)
    if noisy:  # with an rng: new noise per call, centred on the mean weights' values
        rng = np.random.default_rng(0)
        draws = np.stack([net(obs, rng) for _ in range(1000)])
        assert not np.allclose(draws[0], draws[1])
        np.testing.assert_allclose(draws.mean(0), expected, atol=0.1)


def _policy_config(**training) -> DQNConfig:
    return (DQNConfig().environment(observation_space=OBS, action_space=ACT)
            .env_runners(exploration_config={"initial_epsilon": 1.0, "epsilon_timesteps": 10**9})
            .training(model=MODEL, hiddens=[16], **training).debugging(seed=0))


def test_noisy_runner_uses_no_epsilon_and_acts_on_the_mean_when_greedy():
    # epsilon 1 all along: an epsilon-greedy runner acts at random; a noisy one must not.
    cfg = _policy_config(noisy=True, sigma0=1e-6)
    torch.manual_seed(3)
    model = QModel(OBS, ACT.n, MODEL, [16], True, noisy=True, sigma0=1e-6).eval()
    policy = NumpyQPolicy(OBS, ACT, cfg)
    policy.seed(0)
    policy.set_weights(_weights(model))
    obs = np.random.default_rng(1).uniform(-1, 1, (500, 4)).astype(np.float32)
    greedy = model.q_values(torch.as_tensor(obs)).argmax(-1).numpy()
    assert (policy.compute_actions(obs, explore=True)[0] == greedy).mean() > 0.99
    assert (policy.compute_actions(obs, explore=False)[0] == greedy).all()
    plain = NumpyQPolicy(OBS, ACT, _policy_config())
    plain.seed(0)
    plain.set_weights(_weights(QModel(OBS, ACT.n, MODEL, [16], True)))
    assert (plain.compute_actions(obs, explore=True)[0] == greedy).mean() < 0.6


def test_torch_policy_greedy_actions_use_the_mean_weights():
    torch.manual_seed(0)  # the noise drawn does not depend on the tests run before
    policy = DQNTorchPolicy(OBS, ACT, _policy_config(noisy=True, sigma0=5.0))
    obs = np.random.default_rng(2).uniform(-1, 1, (300, 4)).astype(np.float32)
    with torch.no_grad():
        greedy = policy.model.eval()(torch.as_tensor(obs))[0].argmax(-1).numpy()
    policy.model.train()
    assert (policy.compute_actions(obs, explore=False)[0] == greedy).all()
    explored = policy.compute_actions(obs, explore=True)[0]
    assert (explored != greedy).any()  # sigma0 5: the noise moves the argmax
    assert policy.model.training  # the learner's mode is left as it was


def test_q_network_keeps_torchs_default_initialisation():
    # SB3's QNetwork (and CleanRL's DQN) keep nn.Linear's default: weights within
    # 1/sqrt(fan_in). The actor-critic MLP's orthogonal gain-sqrt(2) init learned the tuned
    # CartPole example slower and unstably (docs/benchmark_log.md, issue 18).
    torch.manual_seed(0)
    model = QModel(OBS, ACT.n, {"fcnet_hiddens": [256, 256]}, [], False)
    for layer in (model.trunk[0], model.trunk[2], model.a_head):
        bound = 1 / np.sqrt(layer.in_features)
        assert float(layer.weight.detach().abs().max()) <= bound
        assert float(layer.bias.detach().abs().max()) > 0  # torch's default bias is not zero
