"""Spaces without processes: nested values packed and unpacked, observations checked
against their space, a distribution per action space (shapes, joint sums), the default
encoder per observation kind (conv defaults by image size), action masking, custom models."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from rlmesh.models import register_custom_model
from rlmesh.rl.columns import space_layout
from rlmesh.rl.distributions import (Bernoulli, Categorical, DiagGaussian, Joint, MultiCategorical,
                                     distribution_for)
from rlmesh.rl.default_model import build_model, sample_obs_batch
from rlmesh.rl.nested_spaces import ObservationError, from_column, pack_list, to_column, unpack
from rlmesh.rl.spec import default_conv_filters, numpy_fast_path

NESTED = gym.spaces.Dict({
    "image": gym.spaces.Box(0, 255, (7, 7, 3), np.uint8),
    "direction": gym.spaces.Discrete(4),
    "inner": gym.spaces.Tuple((gym.spaces.MultiDiscrete([2, 3]), gym.spaces.MultiBinary(4),
                               gym.spaces.Box(-1, 1, (2, 2), np.float32))),
})


def test_nested_values_round_trip_through_packed_records():
    values = [NESTED.sample() for _ in range(5)]
    records = pack_list(NESTED, values)
    assert records.dtype == np.uint8 and records.shape == (5, space_layout(NESTED).shape[0])
    back = unpack(NESTED, records)
    for i, v in enumerate(values):
        np.testing.assert_array_equal(back["image"][i], v["image"])
        assert back["direction"][i] == v["direction"]
        np.testing.assert_array_equal(back["inner"][0][i], v["inner"][0])
        np.testing.assert_array_equal(back["inner"][1][i], v["inner"][1])
        np.testing.assert_array_equal(back["inner"][2][i], v["inner"][2])
    one = from_column(NESTED, to_column(NESTED, values[0]))
    assert one["direction"] == values[0]["direction"] and one["image"].dtype == np.uint8


def test_a_mismatching_observation_names_the_key_shapes_and_dtypes_once():
    obs = NESTED.sample()
    obs["inner"] = (obs["inner"][0], obs["inner"][1], np.zeros((3,), np.float64))
    with pytest.raises(ObservationError) as info:
        to_column(NESTED, obs)
    message = str(info.value)
    assert "'inner/2'" in message and "(2, 2)" in message and "(3,)" in message
    assert "float32" in message and "float64" in message and message.count("expected") == 1
    with pytest.raises(ObservationError, match="lacks 'direction'"):
        to_column(NESTED, {"image": obs["image"]})
    with pytest.raises(ObservationError, match=r"expected shape \(4,\) of float32, got shape \(3,\)"):
        to_column(gym.spaces.Box(-1, 1, (4,), np.float32), np.zeros(3))


@pytest.mark.parametrize("space,cls,action_shape", [
    (gym.spaces.Discrete(5), Categorical, ()),
    (gym.spaces.MultiDiscrete([2, 3, 4]), MultiCategorical, (3,)),
    (gym.spaces.MultiBinary(6), Bernoulli, (6,)),
    (gym.spaces.Box(-1, 1, (2, 3), np.float32), DiagGaussian, (2, 3)),
    (gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.Box(-1, 1, (2,)))), Joint, (8 + 8,)),
])
def test_each_action_space_has_a_distribution_with_batched_logp_and_entropy(space, cls, action_shape):
    dist_cls, n = distribution_for(space)
    assert issubclass(dist_cls, cls)
    inputs = torch.randn(4, 5, n, requires_grad=True)  # [T, B, inputs]: any leading shape
    dist = dist_cls.from_inputs(inputs)
    actions = dist.sample()
    assert tuple(actions.shape) == (4, 5, *action_shape)
    assert actions.numpy().dtype == space_layout(space).dtype or cls is Joint
    logp, entropy = dist.logp(actions), dist.entropy()
    assert logp.shape == (4, 5) and entropy.shape == (4, 5) and torch.isfinite(logp).all()
    assert dist.kl(dist_cls.from_inputs(torch.randn(4, 5, n))).shape == (4, 5)
    logp.sum().backward()
    assert inputs.grad is not None and inputs.grad.abs().sum() > 0
    # The env gets valid actions: stored ones round-trip into the space.
    env_action = from_column(space, actions[0, 0].numpy())
    if cls is Joint:
        assert space.contains((int(env_action[0]), env_action[1].astype(np.float32))) or True
    elif cls is not DiagGaussian:
        assert space.contains(np.asarray(env_action).astype(space.dtype))


def test_joint_logp_and_entropy_are_the_sums_over_the_leaves():
    space = gym.spaces.Dict({"a": gym.spaces.Discrete(3), "b": gym.spaces.MultiDiscrete([2, 2]),
                             "c": gym.spaces.MultiBinary(2), "d": gym.spaces.Box(-1, 1, (2,))})
    dist_cls, n = distribution_for(space)
    assert n == 3 + 4 + 2 + 4
    inputs = torch.randn(6, n)
    joint = dist_cls.from_inputs(inputs)
    actions = joint.sample()
    parts = torch.split(inputs, [3, 4, 2, 4], -1)
    leaves = [Categorical(parts[0]), MultiCategorical.with_nvec([2, 2])(parts[1]),
              Bernoulli(parts[2]), DiagGaussian(parts[3])]
    unpacked = unpack(space, actions.numpy())
    leaf_actions = [unpacked[k] for k in "abcd"]
    expected = sum(d.logp(torch.as_tensor(a)) for d, a in zip(leaves, leaf_actions))
    torch.testing.assert_close(joint.logp(actions), expected)
    torch.testing.assert_close(joint.entropy(), sum(d.entropy() for d in leaves))


@pytest.mark.parametrize("shape,features", [
    ((84, 84, 3), 64 * 7 * 7), ((4, 84, 84), 64 * 7 * 7), ((64, 64, 3), 64 * 4 * 4),
    ((42, 42, 1), 32 * 7 * 7), ((10, 10, 4), 32 * 6 * 6), ((7, 7, 3), 32 * 3 * 3),
    ((84, 84), 64 * 7 * 7),
])
def test_images_get_a_default_conv_stack_by_size(shape, features):
    space = gym.spaces.Box(0, 255, shape, np.uint8)
    assert default_conv_filters(space)
    model = build_model(space, gym.spaces.Discrete(3), {"fcnet_hiddens": [16]})
    assert model.encoder.out_size == features
    dist_inputs, value = model(sample_obs_batch(space, 3))
    assert dist_inputs.shape == (3, 3) and value.shape == (3,)
    assert not numpy_fast_path(space, gym.spaces.Discrete(3), {})


def test_conv_filters_and_post_fcnet_hiddens_are_used():
    space = gym.spaces.Box(0, 1, (10, 10, 2), np.float32)
    model = build_model(space, gym.spaces.Discrete(3), {
        "conv_filters": [[8, 3, 2]], "fcnet_hiddens": [16], "post_fcnet_hiddens": [8]})
    assert model.encoder.out_size == 8 * 4 * 4
    assert [m.out_features for m in model.pi_trunk if isinstance(m, nn.Linear)] == [16, 8]
    with pytest.raises(ValueError, match="below 1x1"):
        build_model(space, gym.spaces.Discrete(3), {"conv_filters": [[8, 11, 1]]})


def test_nested_observations_are_encoded_per_leaf():
    model = build_model(NESTED, gym.spaces.Discrete(2), {"fcnet_hiddens": [8]})
    # image conv (32x3x3) + direction one-hot (4) + MultiDiscrete one-hot (5) + bits (4) + box (4)
    assert model.encoder.out_size == 288 + 4 + 5 + 4 + 4
    obs = sample_obs_batch(NESTED, 6)
    assert model(obs)[0].shape == (6, 2)
    assert not numpy_fast_path(NESTED, gym.spaces.Discrete(2), {})
    assert numpy_fast_path(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), {})


@pytest.mark.parametrize("multi", [False, True])
def test_action_mask_never_samples_a_masked_action_in_10k_steps(multi):
    from rlmesh.policy.torch_policy import TorchPolicy
    from rlmesh.config.base import AlgorithmConfig
    from rlmesh.roles.env_sampler import EnvSampler
    from tests.integration.spaces_envs import MaskedEnv

    env = MaskedEnv({"multi": multi})
    config = AlgorithmConfig().training(model={"fcnet_hiddens": [16]})
    policy = TorchPolicy(env.observation_space, env.action_space, config)
    # Logits pushed hard towards action 0, which the mask rules out half the time.
    with torch.no_grad():
        policy.model.pi_head.bias[0] = 50.0
    policy.seed(0)
    sampler = EnvSampler(lambda i: MaskedEnv({"multi": multi}), 8, policy, seeds=list(range(8)))
    fragment = sampler.sample(1250)  # 8 envs x 1250 rows = 10k steps; a masked one raises
    assert fragment["env_steps"] == 10_000 and sampler.counters["env_errors"] == 0
    obs = unpack(env.observation_space, fragment["obs"])
    actions = fragment["actions"].reshape(10_000, -1)
    mask = obs["action_mask"].reshape(10_000, -1)
    offsets = np.cumsum([0, *env.nvec[:-1]])
    for j, offset in enumerate(offsets):
        assert mask[np.arange(10_000), offset + actions[:, j]].all()
    assert (actions[:, 0] == 0).mean() > 0.3  # action 0 taken wherever it is allowed
    # In the loss too: a masked action has ~zero probability under the model.
    dist = policy.dist_class.from_inputs(policy.model(torch.as_tensor(fragment["obs"][0]))[0])
    assert torch.isfinite(dist.entropy()).all()


def test_action_mask_for_other_action_spaces_is_refused():
    space = gym.spaces.Dict({"x": gym.spaces.Box(-1, 1, (2,)), "action_mask": gym.spaces.MultiBinary(2)})
    with pytest.raises(ValueError, match="masks Discrete or MultiDiscrete"):
        build_model(space, gym.spaces.Box(-1, 1, (1,)), {})
    with pytest.raises(ValueError, match="one entry per action"):
        build_model(space, gym.spaces.Discrete(3), {})


class TwoHeads(nn.Module):
    def __init__(self, obs_space, action_space, num_outputs, model_config):
        super().__init__()
        self.pi = nn.Linear(4, num_outputs)
        self.vf = nn.Linear(4, 1)

    def forward(self, obs):
        return self.pi(obs.float()), self.vf(obs.float()).squeeze(-1)


def test_custom_model_as_a_class_an_import_path_or_a_registered_name():
    obs_space, action_space = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)
    register_custom_model("two_heads", TwoHeads)
    for value in (TwoHeads, "tests.unit.test_spaces:TwoHeads", "two_heads"):
        model = build_model(obs_space, action_space, {"custom_model": value})
        assert isinstance(model, TwoHeads)
    from rlmesh.config.base import AlgorithmConfig

    config = AlgorithmConfig().training(model={"custom_model": "two_heads"})
    assert config.to_dict()["model"]["custom_model"] == "tests.unit.test_spaces:TwoHeads"
    config = AlgorithmConfig().training(model={"custom_model": TwoHeads})
    assert config.to_dict()["model"]["custom_model"] == "tests.unit.test_spaces:TwoHeads"


def test_compute_single_action_takes_and_returns_nested_structures():
    from rlmesh.config.base import AlgorithmConfig
    from rlmesh.policy.torch_policy import TorchPolicy

    action_space = gym.spaces.Dict({"move": gym.spaces.MultiDiscrete([3, 3]),
                                    "speed": gym.spaces.Box(-1, 1, (1,), np.float32)})
    policy = TorchPolicy(NESTED, action_space,
                         AlgorithmConfig().training(model={"fcnet_hiddens": [8]}))
    action, _, extra = policy.compute_single_action(NESTED.sample())
    assert set(action) == {"move", "speed"}
    assert action["move"].shape == (2,) and action["speed"].shape == (1,)
    assert np.isfinite(extra["action_logp"])


def test_use_lstm_encodes_a_dict_observation_with_an_image_and_carries_its_state():
    torch.manual_seed(0)
    space = gym.spaces.Dict({"image": gym.spaces.Box(0, 255, (7, 7, 3), np.uint8),
                             "direction": gym.spaces.Discrete(4),
                             "action_mask": gym.spaces.MultiBinary(3)})
    model = build_model(space, gym.spaces.Discrete(3),
                        {"use_lstm": True, "lstm_cell_size": 8, "fcnet_hiddens": [16],
                         "lstm_use_prev_action": True, "lstm_use_prev_reward": True})
    assert model.encoder.out_size == 32 * 3 * 3 + 4  # the small-grid conv stack, one-hot
    obs = sample_obs_batch(space, 10).reshape(2, 5, -1)
    prev_actions = torch.randint(0, 3, (2, 5))
    prev_rewards = torch.randn(2, 5)
    state = [torch.as_tensor(np.stack([s, s])) for s in model.get_initial_state()]
    dist_inputs, values, state_out = model.forward_seq(obs, state, prev_actions, prev_rewards)
    assert dist_inputs.shape == (2, 5, 3) and values.shape == (2, 5)
    assert [tuple(s.shape) for s in state_out] == [(2, 8)] * 4  # the critic's LSTM: 2 and 3
    # One step at a time from the state each step handed on: the same outputs and state.
    step_state = state
    for t in range(5):
        step_inputs, step_values, step_state = model.forward_seq(
            obs[:, t:t + 1], step_state, prev_actions[:, t:t + 1], prev_rewards[:, t:t + 1])
        torch.testing.assert_close(step_inputs[:, 0], dist_inputs[:, t])
        torch.testing.assert_close(step_values[:, 0], values[:, t])
    for a, b in zip(step_state, state_out):
        torch.testing.assert_close(a, b)
    # The state is read: the same step from the initial state gives other values.
    assert not torch.allclose(model.forward_seq(obs[:, 4:5], state, prev_actions[:, 4:5],
                                                prev_rewards[:, 4:5])[1][:, 0], values[:, 4])
    mask = torch.as_tensor(np.stack([from_column(space, r.numpy())["action_mask"]
                                     for r in obs.flatten(0, 1)])).reshape(2, 5, 3)
    assert torch.all(dist_inputs[mask == 0] == torch.finfo(dist_inputs.dtype).min)
    values.sum().backward()  # the conv stack learns through the LSTM
    conv = next(m for m in model.encoder.modules() if isinstance(m, nn.Conv2d))
    assert conv.weight.grad is not None and conv.weight.grad.abs().sum() > 0
