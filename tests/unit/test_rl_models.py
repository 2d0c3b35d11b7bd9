"""The default actor-critic: shapes, preprocessing, initialisation, gradients; and
model_config checking and custom models loaded by import path."""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from rlmesh.rl import ActorCriticMLP, build_model, distribution_for, preprocess_obs
from rlmesh.rl import layers
from rlmesh.rl.layers import Tanh


class TinyNet(nn.Module):
    """A custom model as a user writes one (loaded by the tests via its import path)."""

    def __init__(self, obs_space, action_space, num_outputs, model_config):
        super().__init__()
        self.obs_space = obs_space
        width = model_config["custom_model_config"].get("width", 8)
        self.body = nn.Linear(int(np.prod(obs_space.shape)), width)
        self.pi = nn.Linear(width, num_outputs)
        self.vf = nn.Linear(width, 1)

    def forward(self, obs):
        x = torch.relu(self.body(preprocess_obs(obs, self.obs_space)))
        return self.pi(x), self.vf(x).squeeze(-1)


class WrongShapeNet(TinyNet):
    def forward(self, obs):
        logits, value = super().forward(obs)
        return logits, value.unsqueeze(-1)  # [N, 1] instead of [N]


NOT_A_MODULE = 42

BOX_OBS = gym.spaces.Box(-1.0, 1.0, (3, 2), dtype=np.float32)
SPACES = [
    (BOX_OBS, gym.spaces.Discrete(5), 5),
    (BOX_OBS, gym.spaces.Box(-2.0, 2.0, (3,), dtype=np.float32), 6),
    (gym.spaces.Discrete(4), gym.spaces.Discrete(2), 2),
    (gym.spaces.Discrete(4), gym.spaces.Box(-1.0, 1.0, (2,), dtype=np.float32), 4),
]


@pytest.mark.parametrize("obs_space,action_space,num_outputs", SPACES)
@pytest.mark.parametrize("share", [False, True])
def test_output_shapes(obs_space, action_space, num_outputs, share):
    model = build_model(obs_space, action_space, {"fcnet_hiddens": [16, 16], "vf_share_layers": share})
    obs = torch.as_tensor(np.stack([obs_space.sample() for _ in range(7)]))
    dist_inputs, value = model(obs)
    assert dist_inputs.shape == (7, num_outputs) and value.shape == (7,)
    assert dist_inputs.dtype == value.dtype == torch.float32
    cls, _ = distribution_for(action_space)
    assert cls.from_inputs(dist_inputs).sample().shape[0] == 7


def test_preprocess_one_hot_and_flatten():
    one_hot = preprocess_obs(torch.tensor([0, 3, 1]), gym.spaces.Discrete(4))
    assert one_hot.tolist() == [[1, 0, 0, 0], [0, 0, 0, 1], [0, 1, 0, 0]] and one_hot.dtype == torch.float32
    shifted = preprocess_obs(torch.tensor([5, 7]), gym.spaces.Discrete(3, start=5))
    assert shifted.tolist() == [[1, 0, 0], [0, 0, 1]]
    flat = preprocess_obs(torch.arange(24, dtype=torch.float64).reshape(4, 3, 2), BOX_OBS)
    assert flat.shape == (4, 6) and flat.dtype == torch.float32 and flat[1].tolist() == list(range(6, 12))
    # Leading dims beyond one batch dim ([T, B, ...]) are kept.
    assert preprocess_obs(torch.zeros(5, 4, 3, 2), BOX_OBS).shape == (5, 4, 6)


@pytest.mark.parametrize("space", [
    gym.spaces.Dict({"x": gym.spaces.Discrete(2), "t": gym.spaces.Text(5)}),
    gym.spaces.Box(0, 255, (3, 3, 3), np.uint8),  # an image too small for any default conv
])
def test_unsupported_observation_space_is_named(space):
    with pytest.raises(ValueError, match="custom_model") as info:
        build_model(space, gym.spaces.Discrete(2), {})
    assert str(space) in str(info.value)


def test_defaults_are_rllib_like_with_cleanrl_init():
    model = build_model(BOX_OBS, gym.spaces.Discrete(3), {})
    assert [m.out_features for m in model.pi_trunk if isinstance(m, nn.Linear)] == [256, 256]
    assert all(isinstance(m, (nn.Linear, nn.Tanh)) for m in model.pi_trunk)
    assert model.vf_trunk is not None  # separate value trunk (vf_share_layers=False)
    # Orthogonal: W W^T = gain^2 I for a wide-to-narrow layer; zero biases.
    for head, gain in ((model.pi_head, 0.01), (model.vf_head, 1.0)):
        w = head.weight.detach()
        torch.testing.assert_close(w @ w.T, gain**2 * torch.eye(w.shape[0]), atol=1e-6, rtol=1e-4)
        assert (head.bias == 0).all()
    # The first policy is close to uniform.
    dist_inputs, _ = model(torch.as_tensor(np.stack([BOX_OBS.sample() for _ in range(4)])))
    assert dist_inputs.abs().max() < 0.1


@pytest.mark.parametrize("activation,cls", [("relu", nn.ReLU), ("swish", nn.SiLU), ("linear", nn.Identity)])
def test_activation_choice(activation, cls):
    model = build_model(BOX_OBS, gym.spaces.Discrete(2), {"fcnet_activation": activation, "fcnet_hiddens": [4]})
    assert isinstance(model.pi_trunk[1], cls)


@pytest.mark.parametrize("numpy_kernel", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_tanh_matches_torch_in_values_and_gradients(dtype, numpy_kernel, monkeypatch):
    monkeypatch.setattr(layers, "numpy_tanh_pays", lambda: numpy_kernel)
    x = torch.randn(37, 20, dtype=dtype).t()  # not contiguous
    ours, ref = x.clone().requires_grad_(), x.clone().requires_grad_()
    y = Tanh()(ours)
    torch.testing.assert_close(y, torch.tanh(ref))
    grad = torch.randn_like(y)
    y.backward(grad)
    torch.tanh(ref).backward(grad)
    torch.testing.assert_close(ours.grad, ref.grad)
    with torch.no_grad():
        torch.testing.assert_close(Tanh()(x), torch.tanh(x))
    # torch's own kernel for what numpy cannot take; an output changed in place is caught.
    assert Tanh()(x.to(torch.bfloat16)).dtype == torch.bfloat16
    y = Tanh()(x.clone().requires_grad_())
    y.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_shared_trunk_has_no_value_trunk_and_fewer_parameters():
    sep = build_model(BOX_OBS, gym.spaces.Discrete(2), {"fcnet_hiddens": [32]})
    shared = build_model(BOX_OBS, gym.spaces.Discrete(2), {"fcnet_hiddens": [32], "vf_share_layers": True})
    assert shared.vf_trunk is None
    assert sum(p.numel() for p in shared.parameters()) < sum(p.numel() for p in sep.parameters())


def test_gradients_reach_every_parameter():
    model = build_model(BOX_OBS, gym.spaces.Box(-1, 1, (3,), dtype=np.float32), {"fcnet_hiddens": [8, 8]})
    obs = torch.as_tensor(np.stack([BOX_OBS.sample() for _ in range(5)]))
    dist_inputs, value = model(obs)
    (dist_inputs.pow(2).sum() + value.pow(2).sum()).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_free_log_std_is_a_parameter_starting_at_zero():
    box = gym.spaces.Box(-1, 1, (3,), dtype=np.float32)
    model = build_model(BOX_OBS, box, {"free_log_std": True, "fcnet_hiddens": [8]})
    dist_inputs, _ = model(torch.as_tensor(np.stack([BOX_OBS.sample() for _ in range(4)])))
    assert dist_inputs.shape == (4, 6) and (dist_inputs[:, 3:] == 0).all()
    assert model.log_std.shape == (3,)
    with pytest.raises(ValueError, match="free_log_std needs a Box"):
        build_model(BOX_OBS, gym.spaces.Discrete(4), {"free_log_std": True})


def test_custom_model_by_import_path():
    model = build_model(BOX_OBS, gym.spaces.Discrete(3), {
        "custom_model": "tests.unit.test_rl_models:TinyNet", "custom_model_config": {"width": 5}})
    assert isinstance(model, TinyNet) and model.body.out_features == 5
    dist_inputs, value = model(torch.zeros(2, 3, 2))
    assert dist_inputs.shape == (2, 3) and value.shape == (2,)


@pytest.mark.parametrize("path,match", [
    ("tests.unit.test_rl_models.TinyNet", "'package.module:ClassName'"),
    ("tests.unit.no_such_module:TinyNet", "cannot import module 'tests.unit.no_such_module'"),
    ("tests.unit.test_rl_models:NoSuchNet", "has no attribute 'NoSuchNet'"),
    ("tests.unit.test_rl_models:NOT_A_MODULE", "not a torch.nn.Module subclass"),
    ("tests.unit.test_rl_models:WrongShapeNet", r"value of shape \(2,\), got .* and \(2, 1\)"),
])
def test_bad_custom_model_is_a_clear_error(path, match):
    with pytest.raises(ValueError, match=match):
        build_model(BOX_OBS, gym.spaces.Discrete(3), {"custom_model": path})


def test_unknown_key_names_the_closest_valid_one():
    with pytest.raises(ValueError, match="unknown model_config key 'fcnet_hidden': did you mean 'fcnet_hiddens'"):
        build_model(BOX_OBS, gym.spaces.Discrete(2), {"fcnet_hidden": [64]})
    with pytest.raises(ValueError, match="valid keys"):
        build_model(BOX_OBS, gym.spaces.Discrete(2), {"zzz": 1})


def test_unknown_activation_lists_the_valid_ones():
    with pytest.raises(ValueError, match="'gelu' is not one of"):
        build_model(BOX_OBS, gym.spaces.Discrete(2), {"fcnet_activation": "gelu"})


def test_direct_construction_matches_the_custom_model_contract():
    model = ActorCriticMLP(gym.spaces.Discrete(4), gym.spaces.Discrete(2), 2, {"fcnet_hiddens": [4]})
    dist_inputs, value = model(torch.tensor([1, 2, 3]))
    assert dist_inputs.shape == (3, 2) and value.shape == (3,)


def test_numpy_tanh_is_chosen_only_where_torchs_kernel_is_much_slower(monkeypatch):
    measure = layers.numpy_tanh_pays.__wrapped__  # uncached
    fast_tanh, fast_np = torch.tanh, layers.np.tanh

    def slowed(fn):
        def slow(x):
            time.sleep(0.0002)
            return fn(x)
        return slow

    monkeypatch.setattr(layers.torch, "tanh", slowed(fast_tanh))
    assert measure() is True
    monkeypatch.setattr(layers.torch, "tanh", fast_tanh)
    monkeypatch.setattr(layers.np, "tanh", slowed(fast_np))
    assert measure() is False
    monkeypatch.undo()
    assert layers.numpy_tanh_pays() is layers.numpy_tanh_pays()  # measured once per process
