"""Action distributions built from a model's outputs, and which one an action space needs.

Categorical for Discrete, diagonal Gaussian (clipped by the env runner, as RLlib does) or
tanh-squashed Gaussian for 1-D Box. Every method works over any leading batch shape.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F

from rlmesh.rl.spec import CATEGORICAL, GAUSSIAN, action_dist, clip_actions  # noqa: F401 (re-exported)

_LOG_2PI = math.log(2 * math.pi)


class Distribution:
    """The interface the learner and the env runners use; one subclass per action type."""

    @classmethod
    def required_input_size(cls, action_space: gym.Space) -> int:
        """How many model outputs (distribution inputs) this space needs."""
        raise NotImplementedError

    @classmethod
    def from_inputs(cls, inputs: torch.Tensor) -> "Distribution":
        return cls(inputs)

    def sample(self) -> torch.Tensor:
        """A random action, without gradient."""
        raise NotImplementedError

    def deterministic_sample(self) -> torch.Tensor:
        """The most likely action (mode), for evaluation and ``explore=False``."""
        raise NotImplementedError

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        """Log-probability (or log-density) of ``actions``, one value per batch element."""
        raise NotImplementedError

    def entropy(self) -> torch.Tensor:
        raise NotImplementedError

    def kl(self, other: "Distribution") -> torch.Tensor:
        """KL(self || other), one value per batch element."""
        raise NotImplementedError


class Categorical(Distribution):
    """Discrete(n) actions; inputs are unnormalised logits ``[..., n]``."""

    def __init__(self, logits: torch.Tensor):
        # Clamp so that a masked action (logit -inf) gives 0 * finite, not 0 * -inf = NaN.
        self.logits = torch.clamp(F.log_softmax(logits, dim=-1), min=torch.finfo(logits.dtype).min)
        self.probs = self.logits.exp()

    @classmethod
    def required_input_size(cls, action_space: gym.Space) -> int:
        return int(action_space.n)

    def sample(self) -> torch.Tensor:
        flat = self.probs.detach().reshape(-1, self.probs.shape[-1])
        return torch.multinomial(flat, 1).reshape(self.probs.shape[:-1])

    def deterministic_sample(self) -> torch.Tensor:
        return self.logits.argmax(dim=-1)

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        return self.logits.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        return -(self.probs * self.logits).sum(-1)

    def kl(self, other: "Categorical") -> torch.Tensor:
        return (self.probs * (self.logits - other.logits)).sum(-1)


class DiagGaussian(Distribution):
    """1-D Box actions, unbounded; inputs are ``concat(mean, log_std)``, shape ``[..., 2*d]``.

    As in RLlib, a sample may fall outside the Box: the env runner clips it to the bounds
    (``clip_actions``) before stepping the env, and stores and scores the unclipped sample,
    so ``logp`` is always of what the Gaussian produced.
    """

    def __init__(self, inputs: torch.Tensor):
        self.mean, self.log_std = torch.chunk(inputs, 2, dim=-1)
        self.std = self.log_std.exp()

    @classmethod
    def required_input_size(cls, action_space: gym.Space) -> int:
        return 2 * int(np.prod(action_space.shape))

    def sample(self) -> torch.Tensor:
        return self.rsample().detach()

    def rsample(self) -> torch.Tensor:
        """A sample that gradients flow through (the reparameterisation trick)."""
        return self.mean + self.std * torch.randn_like(self.mean)

    def deterministic_sample(self) -> torch.Tensor:
        return self.mean

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        z = (actions - self.mean) / self.std
        return (-0.5 * z.pow(2) - self.log_std - 0.5 * _LOG_2PI).sum(-1)

    def entropy(self) -> torch.Tensor:
        return (self.log_std + 0.5 * (_LOG_2PI + 1.0)).sum(-1)

    def kl(self, other: "DiagGaussian") -> torch.Tensor:
        var_ratio = (self.std / other.std).pow(2)
        mean_term = ((self.mean - other.mean) / other.std).pow(2)
        return 0.5 * (var_ratio + mean_term - 1.0 - var_ratio.log()).sum(-1)


class SquashedGaussian(Distribution):
    """1-D Box actions squashed into ``[low, high]``: a = low + (tanh(u) + 1) (high - low) / 2,
    with u ~ N(mean, std). Inputs are ``concat(mean, log_std)``, shape ``[..., 2*d]``.

    ``logp`` takes squashed actions and applies the change of variables. Near the bounds,
    where tanh saturates, actions are pulled in by ``EPS`` before inverting it, so the
    log-density there is a (large, finite) approximation. There is no closed-form entropy:
    ``entropy()`` raises and ``entropy_estimate()`` gives a sampled one. Bounds come from
    ``with_bounds`` (``distribution_for`` calls it); the class itself squashes into [-1, 1].
    """

    low: np.ndarray = np.array(-1.0)
    high: np.ndarray = np.array(1.0)
    # Spinning Up / stable-baselines3 range; keeps std away from 0 and tanh from saturating.
    LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0
    EPS = 1e-6

    def __init__(self, inputs: torch.Tensor):
        self.mean, log_std = torch.chunk(inputs, 2, dim=-1)
        self.log_std = torch.clamp(log_std, self.LOG_STD_MIN, self.LOG_STD_MAX)
        self.std = self.log_std.exp()
        self._low = torch.as_tensor(self.low, dtype=inputs.dtype, device=inputs.device)
        self._half_range = (torch.as_tensor(self.high, dtype=inputs.dtype, device=inputs.device) - self._low) / 2

    @classmethod
    def with_bounds(cls, low, high) -> type["SquashedGaussian"]:
        """This distribution squashing into ``[low, high]`` (the Box's bounds, finite)."""
        low, high = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
        return type(cls.__name__, (cls,), {"low": low, "high": high, "__doc__": cls.__doc__})

    @classmethod
    def required_input_size(cls, action_space: gym.Space) -> int:
        return 2 * int(np.prod(action_space.shape))

    def _squash(self, u: torch.Tensor) -> torch.Tensor:
        return self._low + (torch.tanh(u) + 1.0) * self._half_range

    def sample(self) -> torch.Tensor:
        return self.rsample().detach()

    def rsample(self) -> torch.Tensor:
        return self._squash(self.mean + self.std * torch.randn_like(self.mean))

    def deterministic_sample(self) -> torch.Tensor:
        return self._squash(self.mean)

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        y = ((actions - self._low) / self._half_range - 1.0).clamp(-1.0 + self.EPS, 1.0 - self.EPS)
        u = torch.atanh(y)
        z = (u - self.mean) / self.std
        normal_logp = -0.5 * z.pow(2) - self.log_std - 0.5 * _LOG_2PI
        # log |da/du| = log(1 - tanh(u)^2) + log(half_range); the first written in a form
        # that stays finite for large |u|: log(1 - tanh^2 u) = 2 (log 2 - u - softplus(-2u)).
        log_det = 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u)) + self._half_range.log()
        return (normal_logp - log_det).sum(-1)

    def entropy(self) -> torch.Tensor:
        raise NotImplementedError(
            "SquashedGaussian has no closed-form entropy; use entropy_estimate() for a "
            "sampled estimate, or squash=False for a DiagGaussian with exact entropy"
        )

    def entropy_estimate(self, num_samples: int = 1) -> torch.Tensor:
        """Monte-Carlo entropy, -E[log p(a)], from reparameterised samples (differentiable)."""
        return -torch.stack([self.logp(self.rsample()) for _ in range(num_samples)]).mean(0)

    def kl(self, other: "SquashedGaussian") -> torch.Tensor:
        # KL is invariant under the same invertible map applied to both, so it is the
        # KL of the underlying Gaussians, exactly (as long as both share the bounds).
        var_ratio = (self.std / other.std).pow(2)
        mean_term = ((self.mean - other.mean) / other.std).pow(2)
        return 0.5 * (var_ratio + mean_term - 1.0 - var_ratio.log()).sum(-1)


def distribution_for(action_space: gym.Space, squash: bool = False) -> tuple[type[Distribution], int]:
    """The distribution class for ``action_space`` and how many model outputs it needs.

    ``Discrete(n)`` -> ``Categorical``; 1-D ``Box`` -> ``DiagGaussian`` (``squash=False``,
    actions clipped by the env runner) or ``SquashedGaussian`` bound to the Box's bounds
    (``squash=True``, which needs finite bounds). Build one with ``cls.from_inputs(x)``.
    Which spaces are supported, and the errors for the others: ``spec.action_dist``.
    """
    kind, size = action_dist(action_space, squash)
    if kind == CATEGORICAL:
        return Categorical, size
    if kind == GAUSSIAN:
        return DiagGaussian, size
    return SquashedGaussian.with_bounds(action_space.low, action_space.high), size
