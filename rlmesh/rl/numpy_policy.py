"""The default model's policy computed with numpy, for env runners.

A runner whose model is the default MLP acts with this instead of torch: the same
forward pass and the same action distributions, reading the weights the learner's
``ActorCriticMLP`` publishes. Its process never imports torch, which costs 1.4 s and about
150 MB of private memory per process here (docs/benchmark_log.md), and a forward pass over a
few envs is a few small matrix products, where numpy's overhead per call is lower than
torch's. Custom models need torch in the runner (``rlmesh.policy.torch_policy.TorchPolicy``);
``rlmesh.policy.numpy_mlp.NumpyMLPPolicy`` puts this class behind the policy contract.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable

import gymnasium as gym
import numpy as np

from rlmesh.rl.spec import (CATEGORICAL, SQUASHED, action_dist, check_model_config, numpy_fast_path,
                            obs_size)

_LOG_2PI = math.log(2 * math.pi)
BUFFERED_ROWS = 256  # batches this large compute their hidden layers in kept buffers
# SquashedGaussian's clamps (rlmesh.rl.distributions), which scoring on the learner repeats.
LOG_STD_MIN, LOG_STD_MAX, SQUASH_EPS = -20.0, 2.0, 1e-6
GAUSSIAN_LOG_STD_CLIP = 20.0  # DiagGaussian.LOG_STD_CLIP (numpy: no torch import here)

# The same in place (``x`` is a fresh product): a batch of thousands of observations
# makes each temporary a copy of the whole hidden layer.
ACTIVATIONS_INPLACE: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "tanh": lambda x: np.tanh(x, out=x),
    "relu": lambda x: np.maximum(x, np.float32(0.0), out=x),
    "swish": lambda x: np.multiply(x, 1.0 / (1.0 + np.exp(-x)), out=x),
    "linear": lambda x: x,
}

ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "tanh": np.tanh,
    "relu": lambda x: np.maximum(x, 0.0),
    "swish": lambda x: x / (1.0 + np.exp(-x)),
    "linear": lambda x: x,
}


def orthogonal(rng: np.random.Generator, rows: int, cols: int, gain: float) -> np.ndarray:
    """A (semi-)orthogonal matrix times ``gain``: the default model's initialisation."""
    a = rng.standard_normal((max(rows, cols), min(rows, cols)))
    q, r = np.linalg.qr(a)
    q *= np.sign(np.diag(r))
    return (gain * (q if rows >= cols else q.T)).astype(np.float32)


class NumpyPolicy:
    """``policy(obs [N, ...], explore) -> (actions, logp, dist_inputs)`` for the default model.

    Weights are the learner model's ``state_dict`` as arrays; only the policy's part
    (``pi_trunk.*``, ``pi_head.*``, ``log_std``) is read. Until the first ``set_weights``
    the policy has freshly initialised weights of its own.
    """

    def __init__(self, obs_space: gym.Space, action_space: gym.Space, model_config: dict,
                 explore: bool = True, seed: int | None = None) -> None:
        config = check_model_config(model_config)
        if config["custom_model"] is not None:
            raise ValueError("NumpyPolicy computes the default model only; a custom_model "
                             "needs torch (TorchPolicy)")
        self.obs_space, self.action_space = obs_space, action_space
        self.kind, self.num_inputs = action_dist(action_space, config["squash_actions"])
        self.activation = ACTIVATIONS[config["fcnet_activation"]]
        self.activation_ = ACTIVATIONS_INPLACE[config["fcnet_activation"]]
        self.free_log_std = bool(config["free_log_std"])
        self.explore = explore
        self.rng = np.random.default_rng(seed)
        if self.kind == SQUASHED:
            self.low = action_space.low.astype(np.float32)
            self.half_range = ((action_space.high - action_space.low) / 2).astype(np.float32)
        self.action_dtype = np.dtype(np.int64 if self.kind == CATEGORICAL else np.float32)
        self._one_hot = (np.eye(int(obs_space.n), dtype=np.float32)
                         if isinstance(obs_space, gym.spaces.Discrete) else None)
        if not numpy_fast_path(obs_space, action_space, config):
            raise ValueError(f"NumpyPolicy computes the default MLP on a flat observation; "
                             f"observation space {obs_space} with action space {action_space} "
                             f"needs torch (TorchPolicy)")
        self.weights = self._initial_weights(list(config["fcnet_hiddens"])
                                             + list(config["post_fcnet_hiddens"]))
        self._layers: list[tuple[np.ndarray, np.ndarray]] = []
        self._load()

    def _initial_weights(self, hiddens: list[int]) -> dict[str, np.ndarray]:
        w: dict[str, np.ndarray] = {}
        size, outputs = obs_size(self.obs_space), self.num_inputs
        if self.free_log_std:
            outputs //= 2
            w["log_std"] = np.zeros(outputs, np.float32)
        for i, width in enumerate(hiddens):
            w[f"pi_trunk.{2 * i}.weight"] = orthogonal(self.rng, width, size, math.sqrt(2))
            w[f"pi_trunk.{2 * i}.bias"] = np.zeros(width, np.float32)
            size = width
        w["pi_head.weight"] = orthogonal(self.rng, outputs, size, 0.01)
        w["pi_head.bias"] = np.zeros(outputs, np.float32)
        return w

    def set_weights(self, weights: dict[str, Any]) -> None:
        """Take the policy's part of a model ``state_dict`` (``{name: array}``)."""
        mine = {k: np.array(weights[k], dtype=np.float32) for k in self.weights if k in weights}
        missing = sorted(set(self.weights) - set(mine))
        if missing:
            raise ValueError(f"weights lack {missing}: not the default model's state_dict "
                             f"for this config (fcnet_hiddens, free_log_std)")
        for k, v in mine.items():
            if v.shape != self.weights[k].shape:
                raise ValueError(f"weights {k!r} have shape {v.shape}, this policy's "
                                 f"{self.weights[k].shape}")
        self.weights = mine
        self._load()

    def get_weights(self) -> dict[str, np.ndarray]:
        return {k: v.copy() for k, v in self.weights.items()}

    def _load(self) -> None:
        trunk = sorted((int(m.group(1)), k[:-len(".weight")]) for k in self.weights
                       if (m := re.fullmatch(r"pi_trunk\.(\d+)\.weight", k)))
        # x @ W.T + b with W.T stored contiguous, so the product runs on a plain layout.
        self._layers = [(np.ascontiguousarray(self.weights[f"{name}.weight"].T),
                         self.weights[f"{name}.bias"]) for _, name in trunk]
        self._buffers: list[np.ndarray] | None = None
        self._head = (np.ascontiguousarray(self.weights["pi_head.weight"].T),
                      self.weights["pi_head.bias"])

    def dist_inputs(self, obs: np.ndarray) -> np.ndarray:
        """The model's distribution inputs ``[N, num_inputs]`` for raw observations."""
        x = self._preprocess(obs)
        hidden = self._hidden_buffers(len(x))
        for i, (weight, bias) in enumerate(self._layers):
            # Into this batch size's own buffer (a vector env's thousands of rows: a fresh
            # array each call costs the allocator more than the product); bias and
            # activation in place.
            x = x @ weight if hidden is None else np.matmul(x, weight, out=hidden[i])
            x += bias
            x = self.activation_(x)
        out = x @ self._head[0]
        out += self._head[1]
        if self.free_log_std:
            out = np.concatenate([out, np.broadcast_to(self.weights["log_std"], out.shape)], -1)
        return out.astype(np.float32, copy=False)

    def _hidden_buffers(self, rows: int) -> list[np.ndarray] | None:
        """The hidden layers' outputs for batches of ``rows`` (the last size asked for is
        kept), for big batches only; None: fresh arrays."""
        if rows < BUFFERED_ROWS:
            return None
        if self._buffers is None or len(self._buffers[0]) != rows:
            self._buffers = [np.empty((rows, w.shape[1]), np.float32) for w, _ in self._layers]
        return self._buffers

    def _preprocess(self, obs: np.ndarray) -> np.ndarray:
        if self._one_hot is not None:
            index = np.asarray(obs, np.int64).reshape(-1) - int(self.obs_space.start)
            return self._one_hot[index]
        obs = np.asarray(obs, np.float32)
        return obs if obs.ndim == 2 else obs.reshape(len(obs), -1)

    def __call__(self, obs: np.ndarray, explore: bool | None = None,
                 noise: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.act(self.dist_inputs(obs), explore, noise)

    def act(self, inputs: np.ndarray, explore: bool | None = None,
            noise: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(actions, logp, inputs)`` drawn from distribution inputs ``[N, num_inputs]``;
        ``noise``: a Gaussian's standard-normal draws ``[N, d]`` to use (held ones)."""
        explore = self.explore if explore is None else explore
        if self.kind == CATEGORICAL and len(inputs) == 1 and inputs.shape[1] <= 64:
            return (*self._categorical_one(inputs[0].tolist(), explore), inputs)
        if self.kind == CATEGORICAL:
            return (*self._categorical_batch(inputs, explore), inputs)
        actions = self.sample(inputs, explore, noise)
        return actions, self.logp(inputs, actions), inputs

    def _categorical_one(self, logits: list[float], explore: bool) -> tuple[np.ndarray, np.ndarray]:
        """One observation's draw in plain Python: a policy server answers one client
        request at a time, where numpy's per-call overhead is most of the work."""
        top = max(logits)
        weights = [math.exp(x - top) for x in logits]
        total = sum(weights)
        if explore:
            u, action = self.rng.random() * total, 0
            while action < len(weights) - 1 and u >= weights[action]:
                u -= weights[action]
                action += 1
        else:
            action = logits.index(top)
        logp = logits[action] - top - math.log(total)
        return np.array([action], np.int64), np.array([logp], np.float32)

    def _categorical_batch(self, logits: np.ndarray, explore: bool
                           ) -> tuple[np.ndarray, np.ndarray]:
        """A batch's draws and their logp from one pass over the shifted logits (a batch of
        thousands of envs: each numpy call over it counts)."""
        k = logits.shape[-1]
        if k <= 32:  # column by column: numpy's reductions over a short last axis are slow
            top = logits[:, 0].copy()
            for j in range(1, k):
                np.maximum(top, logits[:, j], out=top)
            shifted = logits - top[:, None]
        else:
            shifted = logits - logits.max(-1, keepdims=True)
        weights = np.exp(shifted)
        cdf = np.cumsum(weights, -1)
        total = cdf[:, -1]
        if explore:
            u = self.rng.random(len(logits), dtype=np.float32) * total
            if k <= 32:
                actions = np.zeros(len(logits), np.int64)
                for j in range(k - 1):
                    actions += cdf[:, j] <= u
            else:
                actions = (cdf <= u[:, None]).sum(-1)
                np.minimum(actions, k - 1, out=actions)
        else:
            actions = shifted.argmax(-1)
        picked = shifted[np.arange(len(actions)), actions]
        return actions.astype(np.int64, copy=False), (picked - np.log(total)).astype(np.float32)

    def _categorical(self, log_probs: np.ndarray, explore: bool) -> np.ndarray:
        if not explore:
            return log_probs.argmax(-1)
        # Inverse CDF: the first action whose cumulative probability passes u.
        cdf = np.cumsum(np.exp(log_probs), -1)
        u = self.rng.random((len(log_probs), 1)) * cdf[:, -1:]
        return np.minimum((cdf <= u).sum(-1), log_probs.shape[-1] - 1)

    def sample(self, inputs: np.ndarray, explore: bool = True,
               noise: np.ndarray | None = None) -> np.ndarray:
        """Actions drawn from the distributions ``inputs`` describe (their modes without
        ``explore``), in the dtype fragments store them in. A Gaussian's standard-normal
        draws are ``noise`` where given (a runner's held noise), fresh ones otherwise."""
        if self.kind == CATEGORICAL:
            return self._categorical(_log_softmax(inputs), explore).astype(np.int64)
        mean, log_std = self._gaussian_params(inputs)
        if explore and noise is None:
            noise = self.rng.standard_normal(mean.shape)
        u = mean + np.exp(log_std) * np.reshape(noise, mean.shape) if explore else mean
        if self.kind == SQUASHED:
            u = self.low + (np.tanh(u) + 1.0) * self.half_range
        return u.astype(np.float32)

    def logp(self, inputs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """Log-probability (density) of ``actions`` as the learner's distribution scores them."""
        if self.kind == CATEGORICAL:
            index = np.asarray(actions, np.int64).reshape(-1)
            return _log_softmax(inputs)[np.arange(len(index)), index].astype(np.float32)
        mean, log_std = self._gaussian_params(inputs)
        u = np.asarray(actions, np.float64).reshape(mean.shape)
        log_det = 0.0
        if self.kind == SQUASHED:
            # As SquashedGaussian.logp: pulled in from the bounds by SQUASH_EPS, tanh inverted,
            # in float32 as the learner does it (near the bounds atanh magnifies rounding).
            y = np.clip((actions.astype(np.float32) - self.low) / self.half_range - np.float32(1),
                        np.float32(-1 + SQUASH_EPS), np.float32(1 - SQUASH_EPS)).astype(np.float64)
            u = np.arctanh(y)
            log_det = 2.0 * (math.log(2.0) - u - np.logaddexp(0.0, -2.0 * u)) + np.log(self.half_range)
        z = (u - mean) / np.exp(log_std)
        return (-0.5 * z ** 2 - log_std - 0.5 * _LOG_2PI - log_det).sum(-1).astype(np.float32)

    def _gaussian_params(self, inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mean, log_std = np.split(np.asarray(inputs, np.float64), 2, axis=-1)
        if self.kind == SQUASHED:
            log_std = np.clip(log_std, LOG_STD_MIN, LOG_STD_MAX)
        else:  # the torch twin's clip (DiagGaussian.LOG_STD_CLIP)
            log_std = np.clip(log_std, -GAUSSIAN_LOG_STD_CLIP, GAUSSIAN_LOG_STD_CLIP)
        return mean, log_std


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(-1, keepdims=True)
    shifted -= np.log(np.exp(shifted).sum(-1, keepdims=True))
    return shifted
