"""The env runners' numpy policy against the learner's torch model and distributions:
the same distribution inputs from the same weights, the same log-probabilities, samples
from the right distribution, and clear errors for weights that do not fit."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmesh.rl import NumpyPolicy, build_model, distribution_for

BOX_OBS = gym.spaces.Box(-1.0, 1.0, (3, 2), dtype=np.float32)
DISCRETE_OBS = gym.spaces.Discrete(4, start=2)
DISCRETE_ACT = gym.spaces.Discrete(5)
BOX_ACT = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 10.0], np.float32))


def torch_model_and_policy(obs_space, action_space, model_config, seed=0):
    """A torch model with random (not initial) weights and a numpy policy loaded from it."""
    torch.manual_seed(seed)
    model = build_model(obs_space, action_space, model_config)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5 * torch.randn_like(p))
    policy = NumpyPolicy(obs_space, action_space, model_config, seed=seed)
    policy.set_weights({k: v.numpy() for k, v in model.state_dict().items()})
    return model, policy


def observations(space, n=64):
    space.seed(1)
    return np.stack([space.sample() for _ in range(n)])


@pytest.mark.parametrize("obs_space", [BOX_OBS, DISCRETE_OBS])
@pytest.mark.parametrize("action_space", [DISCRETE_ACT, BOX_ACT])
@pytest.mark.parametrize("model_config", [
    {"fcnet_hiddens": [16, 8]},
    {"fcnet_hiddens": [16], "vf_share_layers": True, "fcnet_activation": "relu"},
    {"fcnet_hiddens": [8, 8, 8], "fcnet_activation": "swish"},
    {"fcnet_hiddens": [], "fcnet_activation": "linear"},
])
def test_distribution_inputs_equal_the_torch_models(obs_space, action_space, model_config):
    model, policy = torch_model_and_policy(obs_space, action_space, model_config)
    obs = observations(obs_space)
    with torch.no_grad():
        expected = model(torch.as_tensor(obs))[0].numpy()
    got = policy.dist_inputs(obs)
    assert got.dtype == np.float32 and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_free_log_std_is_read_from_the_weights():
    config = {"fcnet_hiddens": [8], "free_log_std": True}
    model, policy = torch_model_and_policy(BOX_OBS, BOX_ACT, config)
    obs = observations(BOX_OBS, 5)
    with torch.no_grad():
        expected = model(torch.as_tensor(obs))[0].numpy()
    np.testing.assert_allclose(policy.dist_inputs(obs), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(policy.dist_inputs(obs)[:, 2:], np.broadcast_to(model.log_std.detach().numpy(), (5, 2)))


@pytest.mark.parametrize("action_space,squash", [(DISCRETE_ACT, False), (BOX_ACT, False),
                                                 (BOX_ACT, True)])
@pytest.mark.parametrize("explore", [True, False])
def test_logp_is_what_the_learner_computes_for_the_stored_action(action_space, squash, explore):
    config = {"fcnet_hiddens": [16], "squash_actions": squash}
    _, policy = torch_model_and_policy(BOX_OBS, action_space, config)
    actions, logp, inputs = policy(observations(BOX_OBS, 256), explore)
    cls, _ = distribution_for(action_space, squash)
    dist = cls.from_inputs(torch.as_tensor(inputs))
    expected = dist.logp(torch.as_tensor(actions)).numpy()
    assert logp.dtype == np.float32 and logp.shape == (256,)
    np.testing.assert_allclose(logp, expected, rtol=1e-4, atol=1e-4)
    if not explore:
        np.testing.assert_allclose(actions, dist.deterministic_sample().numpy(), rtol=1e-6, atol=1e-6)
    if squash:
        assert (actions >= action_space.low).all() and (actions <= action_space.high).all()


def test_categorical_samples_follow_the_probabilities():
    policy = NumpyPolicy(BOX_OBS, DISCRETE_ACT, {"fcnet_hiddens": []}, seed=3)
    logits = np.log(np.array([0.5, 0.25, 0.15, 0.1, 0.0]) + 1e-30).astype(np.float32)
    n = 40_000
    inputs = np.tile(logits, (n, 1))
    actions = policy.sample(inputs, explore=True)
    logp = policy.logp(inputs, actions)
    freq = np.bincount(actions, minlength=5) / n
    np.testing.assert_allclose(freq, [0.5, 0.25, 0.15, 0.1, 0.0], atol=0.01)
    assert freq[4] == 0  # probability 0 (a masked action) is never drawn
    np.testing.assert_allclose(logp, logits[actions] - np.log(np.exp(logits).sum()), rtol=1e-5)


def test_gaussian_samples_have_the_models_mean_and_std():
    policy = NumpyPolicy(BOX_OBS, BOX_ACT, {"fcnet_hiddens": []}, seed=4)
    inputs = np.tile(np.array([1.0, -3.0, np.log(0.5), np.log(2.0)], np.float32), (40_000, 1))
    actions = policy.sample(inputs, explore=True)
    np.testing.assert_allclose(actions.mean(0), [1.0, -3.0], atol=0.03)
    np.testing.assert_allclose(actions.std(0), [0.5, 2.0], rtol=0.03)


def test_same_seed_same_actions_and_initial_weights_have_the_models_keys():
    a = NumpyPolicy(BOX_OBS, DISCRETE_ACT, {"fcnet_hiddens": [16, 16]}, seed=7)
    b = NumpyPolicy(BOX_OBS, DISCRETE_ACT, {"fcnet_hiddens": [16, 16]}, seed=7)
    obs = observations(BOX_OBS, 32)
    np.testing.assert_array_equal(a(obs)[0], b(obs)[0])
    model = build_model(BOX_OBS, DISCRETE_ACT, {"fcnet_hiddens": [16, 16]})
    state = model.state_dict()
    weights = a.get_weights()
    assert set(weights) == {k for k in state if k.startswith(("pi_trunk", "pi_head"))}
    assert all(weights[k].shape == tuple(state[k].shape) for k in weights)


def test_weights_that_do_not_fit_are_refused_and_the_old_ones_kept():
    policy = NumpyPolicy(BOX_OBS, DISCRETE_ACT, {"fcnet_hiddens": [16]}, seed=0)
    before = policy.get_weights()
    other = build_model(BOX_OBS, DISCRETE_ACT, {"fcnet_hiddens": [32]}).state_dict()
    with pytest.raises(ValueError, match=r"pi_trunk\.0\.weight.*shape"):
        policy.set_weights({k: v.numpy() for k, v in other.items()})
    with pytest.raises(ValueError, match="lack.*pi_head.bias"):
        policy.set_weights({k: v for k, v in before.items() if k != "pi_head.bias"})
    for k, v in policy.get_weights().items():
        np.testing.assert_array_equal(v, before[k])


def test_custom_models_are_refused():
    with pytest.raises(ValueError, match="custom_model needs torch"):
        NumpyPolicy(BOX_OBS, DISCRETE_ACT, {"custom_model": "pkg.mod:Net"})


def test_one_observation_at_a_time_draws_and_scores_as_a_batch_does():
    """The plain-Python path a policy server takes for a single observation."""
    policy = NumpyPolicy(BOX_OBS, DISCRETE_ACT, {"fcnet_hiddens": []}, seed=5)
    weights = policy.get_weights()
    weights["pi_head.weight"][:] = 0.0
    weights["pi_head.bias"] = np.log(np.array([0.5, 0.25, 0.15, 0.1, 1e-12], np.float32))
    policy.set_weights(weights)
    obs = observations(BOX_OBS, 1)
    draws = [policy(obs, explore=True) for _ in range(20_000)]
    actions = np.array([a[0] for a, _, _ in draws])
    np.testing.assert_allclose(np.bincount(actions, minlength=5) / len(actions),
                               [0.5, 0.25, 0.15, 0.1, 0.0], atol=0.01)
    for actions, logp, inputs in draws[:50]:
        assert actions.dtype == np.int64 and logp.dtype == np.float32
        np.testing.assert_allclose(logp, policy.logp(inputs, actions), rtol=1e-5)
    best, _, _ = policy(obs, explore=False)
    assert best.tolist() == [0]
