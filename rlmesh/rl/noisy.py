"""Noisy linear layers (Fortunato et al. 2018, factorised Gaussian noise): exploration
learned in the weights, DQN's ``noisy``. The runners' numpy twin is ``policy/numpy_q.py``."""

from __future__ import annotations

import math

import torch
from torch import nn


def scaled_noise(size: int, generator: torch.Generator | None = None,
                 device: torch.device | str = "cpu") -> torch.Tensor:
    """``f(x) = sign(x) sqrt(|x|)`` of ``size`` standard normal draws: the paper's f."""
    x = torch.randn(size, generator=generator, device=device)
    return x.sign() * x.abs().sqrt()


class NoisyLinear(nn.Module):
    """``y = (mu_w + sigma_w * eps_w) x + mu_b + sigma_b * eps_b`` with factorised noise
    ``eps_w = f(eps_out) f(eps_in)^T`` and ``eps_b = f(eps_out)``: in + out draws per
    forward instead of in x out. New noise on every forward in training mode (the
    learner: each minibatch, online and target networks independently); in eval mode
    the mean weights alone (greedy acting, export)."""

    def __init__(self, in_features: int, out_features: int, sigma0: float = 0.5) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        bound = 1.0 / math.sqrt(in_features)
        weight = torch.empty(out_features, in_features).uniform_(-bound, bound)
        self.weight_mu = nn.Parameter(weight)
        self.weight_sigma = nn.Parameter(torch.full((out_features, in_features), sigma0 * bound))
        self.bias_mu = nn.Parameter(torch.empty(out_features).uniform_(-bound, bound))
        self.bias_sigma = nn.Parameter(torch.full((out_features,), sigma0 * bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return nn.functional.linear(x, self.weight_mu, self.bias_mu)
        eps_in = scaled_noise(self.in_features, device=x.device)
        eps_out = scaled_noise(self.out_features, device=x.device)
        weight = self.weight_mu + self.weight_sigma * torch.outer(eps_out, eps_in)
        return nn.functional.linear(x, weight, self.bias_mu + self.bias_sigma * eps_out)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"


def linear(in_features: int, out_features: int, noisy: bool, sigma0: float) -> nn.Module:
    return NoisyLinear(in_features, out_features, sigma0) if noisy else nn.Linear(in_features,
                                                                                  out_features)


def noisy_layers(in_size: int, hiddens: list[int], noisy: bool, sigma0: float
                 ) -> tuple[nn.Sequential, int]:
    """Linear (noisy or not) + ReLU layers, and the width they output: DQN's branches."""
    layers: list[nn.Module] = []
    for size in hiddens:
        layers += [linear(in_size, size, noisy, sigma0), nn.ReLU()]
        in_size = size
    return nn.Sequential(*layers), in_size
