"""The default actor-critic MLP, observation preprocessing, and ``build_model``, which
validates a ``model_config`` and builds the default model or a user's by import path.
"""

from __future__ import annotations

import importlib
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rlmesh.rl.distributions import distribution_for
from rlmesh.rl.spec import ACTIVATION_NAMES, MODEL_DEFAULTS, check_model_config, obs_size



class _NumpyTanh(torch.autograd.Function):
    """tanh computed by numpy on CPU tensors, differentiated as torch differentiates it."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        y = torch.from_numpy(np.tanh(x.detach().numpy()))
        ctx.save_for_backward(y)
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(grad, y)


class Tanh(nn.Tanh):
    """``nn.Tanh`` with numpy's kernel on CPU. torch's CPU tanh goes through MKL's vector
    math, which on this AMD machine took 150 us for a [900, 64] float32 batch against
    numpy's 21 us: a quarter of an IMPALA learner's update. Same values (to float
    rounding) and gradients; other devices and dtypes use ``torch.tanh``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64):
            return _NumpyTanh.apply(x.contiguous())
        return torch.tanh(x)


ACTIVATIONS = {"tanh": Tanh, "relu": nn.ReLU, "swish": nn.SiLU, "linear": nn.Identity}
assert set(ACTIVATIONS) == set(ACTIVATION_NAMES)


def preprocess_obs(obs: torch.Tensor, obs_space: gym.Space) -> torch.Tensor:
    """A batch of raw observations ``[N, *obs_space.shape]`` -> float32 ``[N, obs_size]``.

    Box observations are flattened; Discrete(n) ones become one-hot vectors.
    """
    if isinstance(obs_space, gym.spaces.Box):
        return obs.reshape(*obs.shape[: obs.ndim - len(obs_space.shape)], -1).float()
    if isinstance(obs_space, gym.spaces.Discrete):
        return F.one_hot(obs.long() - int(obs_space.start), int(obs_space.n)).float()
    obs_size(obs_space)  # raises the error that names the space
    raise AssertionError("unreachable")


def layer_init(layer: nn.Linear, gain: float = np.sqrt(2), bias: float = 0.0) -> nn.Linear:
    """Orthogonal weights, constant bias: the initialisation CleanRL's PPO uses."""
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.constant_(layer.bias, bias)
    return layer


def mlp(in_size: int, hiddens: list[int], activation: str) -> tuple[nn.Sequential, int]:
    """A trunk of Linear + activation layers, and the width of what it outputs."""
    layers: list[nn.Module] = []
    for size in hiddens:
        layers += [layer_init(nn.Linear(in_size, size)), ACTIVATIONS[activation]()]
        in_size = size
    return nn.Sequential(*layers), in_size


class ActorCriticMLP(nn.Module):
    """obs -> (distribution inputs ``[N, num_outputs]``, value ``[N]``).

    Separate policy and value trunks unless ``vf_share_layers``. The policy head starts
    near zero (gain 0.01) so the first policy is close to uniform / zero-mean; the value
    head uses gain 1.
    """

    def __init__(self, obs_space: gym.Space, action_space: gym.Space, num_outputs: int, model_config: dict):
        super().__init__()
        config = {**MODEL_DEFAULTS, **model_config}
        self.obs_space = obs_space
        hiddens, activation = list(config["fcnet_hiddens"]), config["fcnet_activation"]
        in_size = obs_size(obs_space)

        self.free_log_std = bool(config["free_log_std"])
        if self.free_log_std:
            if not isinstance(action_space, gym.spaces.Box) or num_outputs % 2:
                raise ValueError(f"free_log_std needs a Box action space (Gaussian), got {action_space}")
            num_outputs //= 2
            self.log_std = nn.Parameter(torch.zeros(num_outputs))

        self.pi_trunk, pi_out = mlp(in_size, hiddens, activation)
        self.vf_trunk = None
        vf_out = pi_out
        if not config["vf_share_layers"]:
            self.vf_trunk, vf_out = mlp(in_size, hiddens, activation)
        self.pi_head = layer_init(nn.Linear(pi_out, num_outputs), gain=0.01)
        self.vf_head = layer_init(nn.Linear(vf_out, 1), gain=1.0)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = preprocess_obs(obs, self.obs_space)
        pi_features = self.pi_trunk(x)
        vf_features = pi_features if self.vf_trunk is None else self.vf_trunk(x)
        dist_inputs = self.pi_head(pi_features)
        if self.free_log_std:
            dist_inputs = torch.cat([dist_inputs, self.log_std.expand_as(dist_inputs)], dim=-1)
        return dist_inputs, self.vf_head(vf_features).squeeze(-1)


def import_model_class(path: str) -> type[nn.Module]:
    """The class named by ``"package.module:ClassName"``, imported here."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"custom_model must be 'package.module:ClassName', got {path!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"custom_model {path!r}: cannot import module {module_name!r}: {exc}") from exc
    cls = getattr(module, attr, None)
    if cls is None:
        raise ValueError(f"custom_model {path!r}: module {module_name!r} has no attribute {attr!r}")
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise ValueError(f"custom_model {path!r} is {cls!r}, not a torch.nn.Module subclass")
    return cls


def build_model(obs_space: gym.Space, action_space: gym.Space, model_config: dict) -> nn.Module:
    """The default ``ActorCriticMLP``, or ``model_config["custom_model"]`` if one is named.

    ``num_outputs``, the number of distribution inputs, is what ``distribution_for`` says
    the action space needs (the same with and without squashing). A custom model is a ``torch.nn.Module`` subclass constructed as
    ``Cls(obs_space, action_space, num_outputs, model_config)`` (the full config, defaults
    filled in; its own settings go in ``custom_model_config``) whose ``forward(obs)`` takes
    a batch of raw observations ``[N, *obs_space.shape]`` as a tensor (``preprocess_obs``
    does what the default model does) and returns ``(dist_inputs [N, num_outputs],
    value [N])``. That contract is checked here on two sampled observations.
    """
    config = check_model_config(model_config)
    _, num_outputs = distribution_for(action_space)
    if config["use_lstm"]:
        from rlmesh.rl.recurrent import RecurrentActorCritic, check_recurrent_config

        check_recurrent_config(config, config["custom_model"])
        model = RecurrentActorCritic(obs_space, action_space, num_outputs, config)
    elif config["custom_model"] is None:
        model = ActorCriticMLP(obs_space, action_space, num_outputs, config)
    else:
        cls = import_model_class(config["custom_model"])
        model = cls(obs_space, action_space, num_outputs, config)
    _check_outputs(model, obs_space, num_outputs, config["custom_model"] or "ActorCriticMLP")
    return model


def _check_outputs(model: nn.Module, obs_space: gym.Space, num_outputs: int, name: str) -> None:
    obs = torch.as_tensor(np.stack([obs_space.sample() for _ in range(2)]))
    with torch.no_grad():
        out = model(obs)
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        raise ValueError(f"model {name}: forward(obs) must return (dist_inputs, value), got {type(out).__name__}")
    dist_inputs, value = out
    if tuple(dist_inputs.shape) != (2, num_outputs) or tuple(value.shape) != (2,):
        raise ValueError(
            f"model {name}: for a batch of 2 observations forward(obs) must return dist_inputs of "
            f"shape (2, {num_outputs}) and value of shape (2,), got {tuple(dist_inputs.shape)} "
            f"and {tuple(value.shape)}"
        )
