"""The policies of evolution strategies: a deterministic numpy MLP (linear without hidden
layers) whose parameters are one flat vector, so a perturbation is ``theta + s * noise``.

Runner side: ``compute_actions`` and the flat vector (``get_flat``/``set_flat``). Learner
side, in the driver: ``update`` turns a batch of (noise index, returns) into a step of the
vector (OpenAI-ES: centered ranks, weight decay, Adam; ARS: top directions, SGD).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from rlmesh.policy.policy import Policy
from rlmesh.rl.es_math import SGD, Adam, ars_gradient, es_gradient
from rlmesh.rl.noise_table import NoiseTable
from rlmesh.rl.numpy_policy import ACTIVATIONS
from rlmesh.rl.spec import obs_size


class ESPolicy(Policy):
    """OpenAI-ES's policy (Salimans et al. 2017): argmax of the logits for Discrete actions,
    the output itself for Box ones (rescaled to the bounds as for every algorithm)."""

    #: A policy without hidden layers starts at zero (ARS) instead of at random.
    linear_starts_at_zero = False

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, config: Any) -> None:
        super().__init__(observation_space, action_space, config)
        if not isinstance(action_space, (gym.spaces.Discrete, gym.spaces.Box)):
            raise ValueError(f"{type(self).__name__} acts in Discrete or Box action spaces, "
                             f"not {action_space}")
        if not isinstance(observation_space, (gym.spaces.Box, gym.spaces.Discrete)):
            raise ValueError(f"{type(self).__name__} reads flat Box or Discrete observations, "
                             f"not {observation_space}")
        model = config.model
        self.activation = ACTIVATIONS[model.get("fcnet_activation", "tanh")]
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        outputs = int(action_space.n) if self.discrete else int(np.prod(action_space.shape))
        sizes = [obs_size(observation_space), *model.get("fcnet_hiddens", []), outputs]
        self.shapes = list(zip(sizes[:-1], sizes[1:]))
        self.dim = sum(i * o + o for i, o in self.shapes)
        if self.dim > config.noise_size:
            raise ValueError(f"the policy has {self.dim} parameters, more than the noise table's "
                             f"noise_size ({config.noise_size}): raise noise_size or use a "
                             "smaller model (fcnet_hiddens)")
        self.theta = np.zeros(self.dim, np.float32)
        self._layers = self._views(self.theta)
        self._init(np.random.default_rng(config.seed))
        self.noise: NoiseTable | None = None  # learner side, made at the first update
        self.optimizer: Any = None

    def _views(self, theta: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Each layer's weight [in, out] and bias, as views of ``theta``."""
        layers, at = [], 0
        for i, o in self.shapes:
            layers.append((theta[at:at + i * o].reshape(i, o), theta[at + i * o:at + i * o + o]))
            at += i * o + o
        return layers

    def _init(self, rng: np.random.Generator) -> None:
        """Columns of unit norm (hidden layers) and of norm 0.01 (the output layer), zero
        biases: RLlib's ES initialisation. A linear policy (ARS) starts at zero, as in the
        ARS paper."""
        if len(self._layers) == 1 and self.linear_starts_at_zero:
            return
        for k, (w, _) in enumerate(self._layers):
            x = rng.standard_normal(w.shape)
            gain = 0.01 if k == len(self._layers) - 1 else 1.0
            w[:] = gain * x / np.sqrt((x ** 2).sum(0, keepdims=True))

    # --- runner side ---

    def compute_actions(self, obs_batch: np.ndarray, state_batches: Any = None,
                        prev_action_batch: Any = None, prev_reward_batch: Any = None,
                        explore: bool | None = None, timestep: int | None = None,
                        **kwargs: Any) -> tuple[np.ndarray, list[np.ndarray], dict[str, np.ndarray]]:
        x = np.asarray(obs_batch, np.float32)
        if isinstance(self.observation_space, gym.spaces.Discrete):
            x = np.eye(self.shapes[0][0], dtype=np.float32)[x.astype(np.int64).reshape(-1)]
        x = x.reshape(len(x), -1)
        for w, b in self._layers[:-1]:
            x = self.activation(x @ w + b)
        w, b = self._layers[-1]
        out = x @ w + b
        if self.discrete:
            return out.argmax(-1), [], {}
        return out.reshape(len(out), *self.action_space.shape), [], {}

    def get_flat(self) -> np.ndarray:
        return self.theta.copy()

    def set_flat(self, theta: np.ndarray) -> None:
        """Load a parameter vector in place (the layers are views of it)."""
        self.theta[:] = theta

    def get_weights(self) -> dict[str, np.ndarray]:
        return {"theta": self.theta.copy()}

    def set_weights(self, weights: dict[str, Any]) -> None:
        theta = np.asarray(weights["theta"], np.float32).reshape(-1)
        if theta.size != self.dim:
            raise ValueError(f"weights have {theta.size} parameters, this policy {self.dim} "
                             "(another model: fcnet_hiddens, or another env's spaces)")
        self.set_flat(theta)

    # --- learner side (the driver) ---

    def make_optimizer(self) -> Any:
        return Adam(self.dim, self.config.stepsize)

    def gradient(self, indices: np.ndarray, returns: np.ndarray) -> np.ndarray:
        """The ascent direction: centered ranks, minus the weight decay ``l2_coeff * theta``."""
        g = es_gradient(self.noise, indices, returns, self.dim)
        return g - self.config.l2_coeff * self.theta

    def update(self, batch: dict[str, Any], timesteps: int, **kwargs: Any) -> dict[str, float]:
        """One step of the parameters from ``noise_indices [N]`` and the mirrored pairs'
        ``returns [N, 2]`` (what the runners sent back)."""
        if self.noise is None:
            self.noise = NoiseTable.shared(self.config.noise_size)
        if self.optimizer is None:
            self.optimizer = self.make_optimizer()
        indices = np.asarray(batch["noise_indices"], np.int64)
        returns = np.asarray(batch["returns"], np.float64).reshape(-1, 2)
        self.global_timestep = timesteps
        if not len(indices):
            return {}
        g = self.gradient(indices, returns)
        old = self.theta.astype(np.float64)
        new = self.optimizer.step(old, g)
        self.set_flat(new.astype(np.float32))
        norm = float(np.linalg.norm(old))
        return {"weights_norm": float(np.linalg.norm(new)), "grad_norm": float(np.linalg.norm(g)),
                "update_ratio": float(np.linalg.norm(new - old) / norm) if norm else float("nan"),
                "num_noisy_episodes": int(returns.size),
                "num_env_steps_trained": int(np.sum(batch.get("lengths", 0))),
                "noisy_return_mean": float(returns.mean()),
                "noisy_return_max": float(returns.max())}

    def get_state(self) -> dict[str, Any]:
        import torch  # checkpoints hold tensors (torch.load weights_only refuses arrays)

        optimizer = self.optimizer.get_state() if self.optimizer is not None else {}
        as_tensor = (lambda v: torch.from_numpy(np.array(v)) if isinstance(v, np.ndarray) else v)
        return {"weights": {"theta": torch.from_numpy(self.theta.copy())},
                "optimizer": {k: as_tensor(v) for k, v in optimizer.items()},
                "global_timestep": self.global_timestep}

    def set_state(self, state: dict[str, Any]) -> None:
        self.set_weights({"theta": np.asarray(state["weights"]["theta"])})
        self.global_timestep = int(state.get("global_timestep", 0))
        saved = {k: np.asarray(v) if hasattr(v, "shape") else v
                 for k, v in (state.get("optimizer") or {}).items()}
        if saved:
            self.optimizer = self.make_optimizer()
            self.optimizer.set_state(saved)


class ARSPolicy(ESPolicy):
    """ARS v2 (Mania et al. 2018): a linear policy by default (``fcnet_hiddens: []``) that
    starts at zero, stepped by SGD along the ``rollouts_used`` best directions."""

    linear_starts_at_zero = True

    def make_optimizer(self) -> Any:
        return SGD(self.dim, self.config.sgd_stepsize)

    def gradient(self, indices: np.ndarray, returns: np.ndarray) -> np.ndarray:
        top = max(1, round(self.config.rollouts_used * len(indices) / self.config.num_rollouts))
        return ars_gradient(self.noise, indices, returns, self.dim, top)
