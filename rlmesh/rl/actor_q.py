"""The networks of DDPG, TD3 and SAC: actors (deterministic, or squashed Gaussian /
categorical for SAC) and Q critics taking obs and action (twin when asked), observations
through the default model's encoder. Target copies: ``algorithms/off_policy.py``."""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlmesh.rl.encoders import ObsEncoder
from rlmesh.rl.layers import ACTIVATIONS
from rlmesh.rl.spec import MODEL_DEFAULTS


def hidden_layers(in_size: int, hiddens: list[int], activation: str) -> tuple[nn.Sequential, int]:
    """Linear + activation layers with torch's default initialisation (as stable-baselines3
    and CleanRL build their off-policy networks), and the width they output."""
    layers: list[nn.Module] = []
    for size in hiddens:
        layers += [nn.Linear(in_size, size), ACTIVATIONS[activation]()]
        in_size = size
    return nn.Sequential(*layers), in_size


def encoder_for(obs_space: gym.Space, model_config: dict | None) -> ObsEncoder:
    config = {**MODEL_DEFAULTS, **(model_config or {})}
    return ObsEncoder(obs_space, config, ACTIVATIONS[config["conv_activation"]])


class DeterministicActor(nn.Module):
    """obs -> tanh -> an action in ``[low, high]`` (DDPG's and TD3's mu(s))."""

    def __init__(self, obs_space: gym.Space, low: np.ndarray, high: np.ndarray,
                 hiddens: list[int], activation: str, model_config: dict | None = None):
        super().__init__()
        self.encoder = encoder_for(obs_space, model_config)
        self.trunk, out = hidden_layers(self.encoder.out_size, hiddens, activation)
        self.head = nn.Linear(out, len(low))
        self.register_buffer("low", torch.as_tensor(low))
        self.register_buffer("half_range", torch.as_tensor((high - low) / 2))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        squashed = torch.tanh(self.head(self.trunk(self.encoder(obs))))
        return self.low + (squashed + 1.0) * self.half_range


class StochasticActor(nn.Module):
    """obs -> distribution inputs: ``concat(mean, log_std)`` for a squashed Gaussian over a
    Box, logits for a Discrete space (SAC's pi(a|s))."""

    def __init__(self, obs_space: gym.Space, num_outputs: int, hiddens: list[int],
                 activation: str, model_config: dict | None = None):
        super().__init__()
        self.encoder = encoder_for(obs_space, model_config)
        self.trunk, out = hidden_layers(self.encoder.out_size, hiddens, activation)
        self.head = nn.Linear(out, num_outputs)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.head(self.trunk(self.encoder(obs)))


class EnsembleLinear(nn.Module):
    """``members`` independent Linear layers applied in one batched matmul: ``[E, N, in]``
    -> ``[E, N, out]``. Twin critics then cost the kernel launches of one, which is most
    of a small network's time. Initialised as ``nn.Linear`` (uniform in +-1/sqrt(in))."""

    def __init__(self, members: int, in_size: int, out_size: int):
        super().__init__()
        bound = 1.0 / math.sqrt(in_size)
        self.weight = nn.Parameter(torch.empty(members, in_size, out_size).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(members, 1, out_size).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, x, self.weight)


class TwinQ(nn.Module):
    """One Q network, or two (``twin_q``: TD3's and SAC's clipped double Q), computed
    together; ``forward`` returns each one's estimate: Q(s, a) ``[N]`` for a Box action
    space (the action concatenated to the encoded observation), Q(s, .) ``[N, n]`` for a
    Discrete one."""

    def __init__(self, obs_space: gym.Space, action_space: gym.Space, hiddens: list[int],
                 activation: str, twin_q: bool, model_config: dict | None = None):
        super().__init__()
        self.members = 2 if twin_q else 1
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        encoders = [encoder_for(obs_space, model_config) for _ in range(self.members)]
        # A parameterless encoder (flat observations) serves both critics.
        self.shared_encoder = not any(p.numel() for p in encoders[0].parameters())
        self.encoders = nn.ModuleList(encoders[:1] if self.shared_encoder else encoders)
        in_size = encoders[0].out_size + (0 if self.discrete else int(np.prod(action_space.shape)))
        layers: list[nn.Module] = []
        for size in hiddens:
            layers += [EnsembleLinear(self.members, in_size, size), ACTIVATIONS[activation]()]
            in_size = size
        self.trunk = nn.Sequential(*layers)
        self.head = EnsembleLinear(self.members, in_size,
                                   int(action_space.n) if self.discrete else 1)

    def forward(self, obs: torch.Tensor, actions: torch.Tensor | None = None) -> list[torch.Tensor]:
        if self.shared_encoder:
            features = self.encoders[0](obs).expand(self.members, -1, -1)
        else:
            features = torch.stack([encoder(obs) for encoder in self.encoders])
        if not self.discrete:
            a = actions.reshape(len(actions), -1).expand(self.members, -1, -1)
            features = torch.cat([features, a], -1)
        q = self.head(self.trunk(features))
        return list(q.unbind(0)) if self.discrete else list(q.squeeze(-1).unbind(0))

    def one_by_one(self, obs: torch.Tensor, actions: torch.Tensor) -> list[torch.Tensor]:
        """``self(obs, actions)`` for Box actions, computed one member at a time: each layer
        a plain matmul on that member's slice of the ensemble's weights, the head a
        matrix-vector product, ReLU in place. The same values; on CQL's conservative term
        (3 x num_actions x B rows) it costs less on the CPU (forward and backward of 7,936
        rows at [256, 256], one thread: 77-85 against 100 ms): the batched matmul's weight
        gradient copies its transposed input, the head's input gradient runs as a batched
        matmul of inner size 1, and each new activation is another large buffer."""
        shared = self.encoders[0](obs) if self.shared_encoder else None
        actions = actions.reshape(len(actions), -1)
        out = []
        for i in range(self.members):
            features = shared if shared is not None else self.encoders[i](obs)
            x = torch.cat([features, actions], -1)
            for layer in self.trunk:
                if isinstance(layer, EnsembleLinear):
                    x = torch.addmm(layer.bias[i], x, layer.weight[i])
                else:  # in place on the matmul's output (its backward does not read it)
                    x = torch.relu_(x) if isinstance(layer, nn.ReLU) else layer(x)
            head = self.head.weight[i, :, 0].to(x.dtype)  # mv is not autocast: bf16 x, f32 w
            out.append(torch.mv(x, head) + self.head.bias[i, 0])
        return out

    def min(self, obs: torch.Tensor, actions: torch.Tensor | None = None) -> torch.Tensor:
        qs = self(obs, actions)
        return qs[0] if len(qs) == 1 else torch.minimum(qs[0], qs[1])


class frozen:
    """``with frozen(critic_params): q = critic(obs, actor(obs))`` -- gradients flow into the
    actions but not into the critic's parameters, so one backward pass serves the critic's
    loss and the actor's (the actor's must not move the critic). Takes the parameters as a
    list made once: walking the module for them on every step costs more than the rest."""

    def __init__(self, params: list[torch.Tensor]):
        self.params = params

    def __enter__(self) -> None:
        for p in self.params:
            p.requires_grad_(False)

    def __exit__(self, *exc: Any) -> None:
        for p in self.params:
            p.requires_grad_(True)
