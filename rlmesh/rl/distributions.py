"""Action distributions built from a model's outputs, and which one an action space needs.

Categorical for Discrete, MultiCategorical for MultiDiscrete, Bernoulli for MultiBinary,
diagonal Gaussian (clipped by the env runner, as RLlib does) or tanh-squashed Gaussian for
Box (any shape), and a Joint one per leaf for Tuple/Dict (logp and entropy summed, actions
as packed records). Every method works over any leading batch shape.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F

from rlmesh.rl.nested_spaces import leaves
from rlmesh.rl.spec import BERNOULLI, CATEGORICAL, GAUSSIAN, JOINT, MULTI_CATEGORICAL, action_dist
from rlmesh.rl.spec import clip_actions  # noqa: F401 (re-exported)
from rlmesh.rl.torch_spaces import pack_tensors, unpack_tensor

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

    event_shape: tuple[int, ...] | None = None  # a Box of more than 1 dim: its shape
    # RLlib's log_std_clip_param: an entropy bonus on an env that clips actions can push
    # log_std up without bound (RLlib's pendulum-appo.yaml reached 70, then a NaN gradient).
    LOG_STD_CLIP = 20.0

    def __init__(self, inputs: torch.Tensor):
        self.mean, log_std = torch.chunk(inputs, 2, dim=-1)
        self.log_std = torch.clamp(log_std, -self.LOG_STD_CLIP, self.LOG_STD_CLIP)
        self.std = self.log_std.exp()

    @classmethod
    def with_shape(cls, shape: tuple[int, ...]) -> type:
        """This distribution with actions of ``shape`` (flattened inside)."""
        if len(shape) <= 1:
            return cls
        return type(cls.__name__, (cls,), {"event_shape": tuple(shape), "__doc__": cls.__doc__})

    @classmethod
    def required_input_size(cls, action_space: gym.Space) -> int:
        return 2 * int(np.prod(action_space.shape))

    def sample(self) -> torch.Tensor:
        return self.rsample().detach()

    def rsample(self) -> torch.Tensor:
        """A sample that gradients flow through (the reparameterisation trick)."""
        return self.sample_with(torch.randn_like(self.mean))

    def sample_with(self, noise: torch.Tensor) -> torch.Tensor:
        """The action ``mean + std * noise`` for standard-normal draws ``noise`` of the
        flat shape ``[..., d]`` (a runner's held noise, ``noise_hold_steps``)."""
        return _shaped(self, self.mean + self.std * noise)

    def deterministic_sample(self) -> torch.Tensor:
        return _shaped(self, self.mean)

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        actions = _flat(self, actions)
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
    event_shape: tuple[int, ...] | None = None
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
        shape = tuple(low.shape) if low.ndim > 1 else None
        return type(cls.__name__, (cls,), {"low": low.reshape(-1), "high": high.reshape(-1),
                                           "event_shape": shape, "__doc__": cls.__doc__})

    @classmethod
    def required_input_size(cls, action_space: gym.Space) -> int:
        return 2 * int(np.prod(action_space.shape))

    def _squash(self, u: torch.Tensor) -> torch.Tensor:
        return self._low + (torch.tanh(u) + 1.0) * self._half_range

    def sample(self) -> torch.Tensor:
        return self.rsample().detach()

    def rsample(self) -> torch.Tensor:
        return self.sample_with(torch.randn_like(self.mean))

    def sample_with(self, noise: torch.Tensor) -> torch.Tensor:
        """The squashed ``mean + std * noise`` for standard-normal draws ``noise``."""
        return _shaped(self, self._squash(self.mean + self.std * noise))

    def deterministic_sample(self) -> torch.Tensor:
        return _shaped(self, self._squash(self.mean))

    def rsample_with_logp(self) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised sample and its log-density, from the pre-squash value (SAC's
        losses): exact where ``logp`` of the squashed action must invert a saturated tanh."""
        z = torch.randn_like(self.mean)
        u = self.mean + self.std * z
        normal_logp = -0.5 * z.pow(2) - self.log_std - 0.5 * _LOG_2PI
        log_det = 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u)) + self._half_range.log()
        return _shaped(self, self._squash(u)), (normal_logp - log_det).sum(-1)

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        actions = _flat(self, actions)
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


def _shaped(dist: Any, flat: torch.Tensor) -> torch.Tensor:
    shape = dist.event_shape
    return flat if shape is None else flat.reshape(*flat.shape[:-1], *shape)


def _flat(dist: Any, actions: torch.Tensor) -> torch.Tensor:
    shape = dist.event_shape
    return actions if shape is None else actions.reshape(*actions.shape[:actions.ndim - len(shape)], -1)


class MultiCategorical(Distribution):
    """MultiDiscrete(nvec) actions ``[..., k]``: one Categorical per entry, over the
    inputs' consecutive slices of sizes nvec; logp and entropy summed over the entries."""

    nvec: tuple[int, ...] = ()

    def __init__(self, inputs: torch.Tensor):
        self.cats = [Categorical(x) for x in torch.split(inputs, list(self.nvec), dim=-1)]

    @classmethod
    def with_nvec(cls, nvec: Any) -> type["MultiCategorical"]:
        return type(cls.__name__, (cls,), {"nvec": tuple(int(n) for n in np.asarray(nvec).reshape(-1)),
                                           "__doc__": cls.__doc__})

    @classmethod
    def required_input_size(cls, action_space: gym.Space) -> int:
        return int(np.sum(action_space.nvec))

    def sample(self) -> torch.Tensor:
        return torch.stack([c.sample() for c in self.cats], dim=-1)

    def deterministic_sample(self) -> torch.Tensor:
        return torch.stack([c.deterministic_sample() for c in self.cats], dim=-1)

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        return sum(c.logp(actions[..., i]) for i, c in enumerate(self.cats))

    def entropy(self) -> torch.Tensor:
        return sum(c.entropy() for c in self.cats)

    def kl(self, other: "MultiCategorical") -> torch.Tensor:
        return sum(a.kl(b) for a, b in zip(self.cats, other.cats))


class Bernoulli(Distribution):
    """MultiBinary actions (any shape, stored as int8); inputs are one logit per bit."""

    event_shape: tuple[int, ...] | None = None

    def __init__(self, logits: torch.Tensor):
        self.logits = logits

    @classmethod
    def with_shape(cls, shape: tuple[int, ...]) -> type["Bernoulli"]:
        return type(cls.__name__, (cls,), {"event_shape": tuple(shape), "__doc__": cls.__doc__})

    def sample(self) -> torch.Tensor:
        bits = torch.bernoulli(torch.sigmoid(self.logits.detach())).to(torch.int8)
        return _shaped(self, bits)

    def deterministic_sample(self) -> torch.Tensor:
        return _shaped(self, (self.logits > 0).to(torch.int8))

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        bits = _flat(self, actions).to(self.logits.dtype)
        return -F.binary_cross_entropy_with_logits(self.logits, bits, reduction="none").sum(-1)

    def entropy(self) -> torch.Tensor:
        p = torch.sigmoid(self.logits)
        return F.binary_cross_entropy_with_logits(self.logits, p, reduction="none").sum(-1)

    def kl(self, other: "Bernoulli") -> torch.Tensor:
        p = torch.sigmoid(self.logits)
        log_p, log_q = F.logsigmoid(self.logits), F.logsigmoid(other.logits)
        log_1p, log_1q = F.logsigmoid(-self.logits), F.logsigmoid(-other.logits)
        return (p * (log_p - log_q) + (1 - p) * (log_1p - log_1q)).sum(-1)


class Joint(Distribution):
    """Tuple/Dict actions: one distribution per leaf over consecutive slices of the inputs;
    actions are packed records (``rl/nested_spaces.py``) ``[..., record_size]``; logp, entropy
    and KL are the sums over the leaves (the leaves are independent given the inputs)."""

    leaves: list = []
    classes: list = []
    sizes: list = []

    def __init__(self, inputs: torch.Tensor):
        self.parts = [cls(x) for cls, x in zip(self.classes, torch.split(inputs, self.sizes, dim=-1))]

    @classmethod
    def for_space(cls, space: gym.Space, squash: bool) -> type["Joint"]:
        ls = leaves(space)
        found = [distribution_for(leaf.space, squash) for leaf in ls]
        return type(cls.__name__, (cls,), {"leaves": ls, "classes": [c for c, _ in found],
                                           "sizes": [n for _, n in found], "__doc__": cls.__doc__})

    def _pack(self, values: list[torch.Tensor]) -> torch.Tensor:
        return pack_tensors(self.leaves, {leaf.path: v for leaf, v in zip(self.leaves, values)})

    def _unpack(self, actions: torch.Tensor) -> list[torch.Tensor]:
        values = unpack_tensor(self.leaves, actions)
        return [values[leaf.path] for leaf in self.leaves]

    def sample(self) -> torch.Tensor:
        return self._pack([d.sample() for d in self.parts])

    def deterministic_sample(self) -> torch.Tensor:
        return self._pack([d.deterministic_sample() for d in self.parts])

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        return sum(d.logp(a) for d, a in zip(self.parts, self._unpack(actions)))

    def entropy(self) -> torch.Tensor:
        return sum(d.entropy_estimate() if hasattr(d, "entropy_estimate") else d.entropy()
                   for d in self.parts)

    def kl(self, other: "Joint") -> torch.Tensor:
        return sum(a.kl(b) for a, b in zip(self.parts, other.parts))


def distribution_for(action_space: gym.Space, squash: bool = False) -> tuple[type[Distribution], int]:
    """The distribution class for ``action_space`` and how many model outputs it needs.

    ``Discrete(n)`` -> ``Categorical``; ``MultiDiscrete`` -> ``MultiCategorical``;
    ``MultiBinary`` -> ``Bernoulli``; ``Box`` -> ``DiagGaussian`` (``squash=False``, actions
    clipped by the env runner) or ``SquashedGaussian`` bound to the Box's bounds
    (``squash=True``, which needs finite bounds); ``Tuple``/``Dict`` -> ``Joint``. Build
    one with ``cls.from_inputs(x)``. Which spaces are supported, and the errors for the
    others: ``spec.action_dist``.
    """
    kind, size = action_dist(action_space, squash)
    if kind == CATEGORICAL:
        return Categorical, size
    if kind == MULTI_CATEGORICAL:
        return MultiCategorical.with_nvec(action_space.nvec), size
    if kind == BERNOULLI:
        return Bernoulli.with_shape(tuple(action_space.shape)), size
    if kind == JOINT:
        return Joint.for_space(action_space, squash), size
    if kind == GAUSSIAN:
        return DiagGaussian.with_shape(tuple(action_space.shape)), size
    return SquashedGaussian.with_bounds(action_space.low, action_space.high), size
