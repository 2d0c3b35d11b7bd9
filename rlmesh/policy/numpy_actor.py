"""The runner side of DDPG, TD3 and SAC in numpy: the actor their learners train
(``rl/actor_q.py``) computed from its weights, with the same exploration (uniform random
steps, Gaussian/OU noise, squashed-Gaussian or categorical sampling), so a runner process
acting with it never imports torch."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from rlmesh.policy.numpy_q import STEP_INDEX, layers_of
from rlmesh.policy.policy import Policy
from rlmesh.rl.action_noise import ActionNoise, action_bounds, uniform_actions
from rlmesh.rl.numpy_policy import ACTIVATIONS, LOG_STD_MAX, LOG_STD_MIN


class NumpyActor:
    """``StochasticActor`` / ``DeterministicActor`` before the squash: flat observations
    (Box flattened, Discrete one-hot) -> ``trunk.<i>`` Linear + activation -> ``head``."""

    def __init__(self, obs_space: gym.Space, activation: str) -> None:
        self.obs_space = obs_space
        self.activation = ACTIVATIONS[activation]
        self._one_hot = (np.eye(int(obs_space.n), dtype=np.float32)
                         if isinstance(obs_space, gym.spaces.Discrete) else None)
        self.loaded = False

    def set_weights(self, weights: dict[str, Any]) -> None:
        self.trunk = layers_of(weights, "trunk")
        self.head = layers_of({"h.0.weight": weights["head.weight"],
                               "h.0.bias": weights["head.bias"]}, "h")[0]
        self.loaded = True

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        if self._one_hot is not None:
            x = self._one_hot[np.asarray(obs, np.int64).reshape(-1) - int(self.obs_space.start)]
        else:
            x = np.asarray(obs, np.float32).reshape(len(obs), -1)
        for w, b in self.trunk:
            x = self.activation(x @ w + b)
        return x @ self.head[0] + self.head[1]


def squash(u: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """tanh into ``[low, high]``, as the torch actors and ``SquashedGaussian`` do (float32)."""
    half_range = (high - low) / np.float32(2)
    return (low + (np.tanh(u) + np.float32(1)) * half_range).astype(np.float32)


def squashed_gaussian(inputs: np.ndarray, low: np.ndarray, high: np.ndarray,
                      normals: np.ndarray | None) -> np.ndarray:
    """``concat(mean, log_std)`` -> squash(mean + std * normals); the mode without normals."""
    mean, log_std = np.split(inputs.astype(np.float32, copy=False), 2, axis=-1)
    if normals is None:
        return squash(mean, low, high)
    std = np.exp(np.clip(log_std, LOG_STD_MIN, LOG_STD_MAX))
    return squash(mean + std * normals.astype(np.float32, copy=False), low, high)


def categorical(logits: np.ndarray, rng: np.random.Generator | None) -> np.ndarray:
    """A draw per row of ``logits`` (inverse CDF); the argmax without ``rng``."""
    if rng is None:
        return logits.argmax(-1)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    cdf = np.cumsum(probs, -1)
    u = rng.random((len(logits), 1)) * cdf[:, -1:]
    return np.minimum((cdf <= u).sum(-1), logits.shape[-1] - 1)


class _NumpyActorPolicy(Policy):
    """What both share: the actor, the step index n-step replay needs, weights (the actor's
    ``state_dict`` plus ``_timestep``, the run's env steps, which exploration follows)."""

    view_requirements = STEP_INDEX

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, config: Any,
                 activation: str) -> None:
        super().__init__(observation_space, action_space, config)
        self.actor = NumpyActor(observation_space, activation)
        self.rng = np.random.default_rng()
        self._weights: dict[str, np.ndarray] = {}

    def seed(self, seed: int | None) -> None:
        self.rng = np.random.default_rng(seed)

    def get_weights(self) -> dict[str, np.ndarray]:
        return dict(self._weights)

    def set_weights(self, weights: dict[str, Any]) -> None:
        self._weights = {k: np.asarray(v) for k, v in weights.items()}
        self.actor.set_weights(self._weights)
        if "_timestep" in weights:
            self.on_timestep(int(np.asarray(weights["_timestep"])))

    def on_timestep(self, timestep: int) -> None:
        """The run has sampled ``timestep`` env steps."""

    def _shaped(self, actions: np.ndarray) -> np.ndarray:
        return actions.reshape(len(actions), *self.action_space.shape).astype(np.float32,
                                                                               copy=False)


class NumpyDDPGPolicy(_NumpyActorPolicy):
    """``DDPGTorchPolicy.compute_actions`` in numpy (DDPG and TD3): mu(s) squashed into the
    actor's bounds, plus the runner's ``ActionNoise`` when exploring."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, config: Any) -> None:
        super().__init__(observation_space, action_space, config, config.actor_hidden_activation)
        self.low, self.high = action_bounds(action_space, config)
        self.noise = ActionNoise(config.exploration_config, self.low, self.high)

    def seed(self, seed: int | None) -> None:
        super().seed(seed)
        self.noise.seed(seed)

    def compute_actions(self, obs_batch: np.ndarray, state_batches: Any = None,
                        prev_action_batch: Any = None, prev_reward_batch: Any = None,
                        explore: bool | None = None, timestep: int | None = None,
                        **kwargs: Any) -> tuple[np.ndarray, list, dict]:
        explore = self.config.explore if explore is None else explore
        if self.actor.loaded:
            actions = squash(self.actor(obs_batch), self.low, self.high)
        else:  # no weights yet: nothing to act on (the random phase covers this in practice)
            actions = uniform_actions(self.rng, self.low, self.high, len(obs_batch))
        if explore:
            actions = self.noise(actions)
        return self._shaped(actions), [], {}

    def on_timestep(self, timestep: int) -> None:
        self.noise.timestep = max(self.noise.timestep, timestep)


class NumpySACPolicy(_NumpyActorPolicy):
    """``SACTorchPolicy.compute_actions`` in numpy: ``random_timesteps`` of uniform random
    actions, then a squashed Gaussian (Box) or categorical (Discrete) draw; the mode
    without exploration."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, config: Any) -> None:
        super().__init__(observation_space, action_space, config,
                         config.policy_model_config["fcnet_activation"])
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        if not self.discrete:
            self.low, self.high = action_bounds(action_space, config)
        self.timestep = 0  # steps acted with exploration on this copy (random_timesteps)

    def compute_actions(self, obs_batch: np.ndarray, state_batches: Any = None,
                        prev_action_batch: Any = None, prev_reward_batch: Any = None,
                        explore: bool | None = None, timestep: int | None = None,
                        normals: np.ndarray | None = None,
                        **kwargs: Any) -> tuple[np.ndarray, list, dict]:
        """``normals``: the standard normals of the Gaussian draw (tests feed torch's);
        drawn from this policy's generator otherwise."""
        explore = self.config.explore if explore is None else explore
        n = len(obs_batch)
        if explore:
            self.timestep += n
            random = self.timestep - n < self.config.exploration_config.get("random_timesteps", 0)
            if random or not self.actor.loaded:
                return self._random_actions(n), [], {}
        inputs = self.actor(obs_batch)
        if self.discrete:
            return categorical(inputs, self.rng if explore else None).astype(np.int64), [], {}
        if explore and normals is None:
            normals = self.rng.standard_normal((n, len(self.low)), np.float32)
        return self._shaped(squashed_gaussian(inputs, self.low, self.high,
                                              normals if explore else None)), [], {}

    def _random_actions(self, n: int) -> np.ndarray:
        if self.discrete:
            return self.rng.integers(0, int(self.action_space.n), size=n).astype(np.int64)
        return self._shaped(uniform_actions(self.rng, self.low, self.high, n))

    def on_timestep(self, timestep: int) -> None:
        self.timestep = max(self.timestep, timestep)
