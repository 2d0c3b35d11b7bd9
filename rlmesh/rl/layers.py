"""The layers models are built of: activations by name (tanh with numpy's kernel where that
is faster), CleanRL's orthogonal initialisation, MLP trunks, and the action-mask check."""

from __future__ import annotations

import functools
import time
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlmesh.rl.spec import ACTION_MASK, ACTIVATION_NAMES


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
    """``nn.Tanh`` with numpy's kernel on CPU where torch's is much slower. On an AMD EPYC
    machine torch's CPU tanh (MKL's vector math) took 150 us for a [900, 64] float32 batch
    against numpy's 21 us: a quarter of an IMPALA learner's update. On an Intel machine
    with AVX-512 the two kernels cost the same (6 us at [256, 64]) and the detour through
    numpy, an autograd Function of its own, made a PPO gradient step 1.19x slower.
    ``numpy_tanh_pays`` measures which case this CPU is, once per process. Same values (to
    float rounding) and gradients either way; other devices and dtypes use ``torch.tanh``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64)
                and numpy_tanh_pays()):
            return _NumpyTanh.apply(x.contiguous())
        return torch.tanh(x)


NUMPY_TANH_MARGIN = 2.0  # numpy's kernel must be this much faster to pay for the detour


@functools.cache
def numpy_tanh_pays() -> bool:
    """Whether numpy's tanh beats torch's on this CPU by ``NUMPY_TANH_MARGIN``: the best of
    5 rounds of 10 calls each on a [256, 64] float32 batch (about 1 ms; 5 ms where torch's
    kernel is the slow one), with torch's thread setting at the first call. The margin
    keeps a machine where the two are close from choosing differently run to run (the
    kernels round differently, and a seeded run should repeat)."""
    x = torch.linspace(-3.0, 3.0, 256 * 64, device="cpu").reshape(256, 64)
    a = x.numpy()

    def best(fn: Any) -> float:
        fn()
        times = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(10):
                fn()
            times.append(time.perf_counter() - start)
        return min(times)

    return best(lambda: torch.tanh(x)) > NUMPY_TANH_MARGIN * best(lambda: np.tanh(a))


ACTIVATIONS = {"tanh": Tanh, "relu": nn.ReLU, "swish": nn.SiLU, "linear": nn.Identity}
assert set(ACTIVATIONS) == set(ACTIVATION_NAMES)


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


def check_action_mask(leaf: Any, action_space: gym.Space, num_outputs: int) -> None:
    if not isinstance(action_space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
        raise ValueError(f"the observation's {ACTION_MASK!r} masks Discrete or MultiDiscrete "
                         f"actions; the action space is {action_space}")
    if int(np.prod(leaf.shape)) != num_outputs:
        raise ValueError(f"observation {ACTION_MASK!r} has shape {leaf.shape}; the action space "
                         f"{action_space} needs one entry per action ({num_outputs})")


def free_log_std(model: nn.Module, config: dict, action_space: gym.Space, num_outputs: int) -> int:
    """RLlib's ``free_log_std``: the Gaussian's log std as a state-free parameter of
    ``model`` (``model.log_std``) instead of half of the head's outputs; the head's size."""
    model.free_log_std = bool(config["free_log_std"])
    if not model.free_log_std:
        return num_outputs
    if not isinstance(action_space, gym.spaces.Box) or num_outputs % 2:
        raise ValueError(f"free_log_std needs a Box action space (Gaussian), got {action_space}")
    model.log_std = nn.Parameter(torch.full((num_outputs // 2,), float(config["log_std_init"])))
    return num_outputs // 2
