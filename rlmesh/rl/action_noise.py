"""Exploration on the runners for continuous-control policies: uniform random actions for the
first ``random_timesteps`` steps, then Gaussian or Ornstein-Uhlenbeck noise on a deterministic
policy's actions (RLlib's ``GaussianNoise`` / ``OrnsteinUhlenbeckNoise`` exploration configs)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

NOISE_TYPES = ("GaussianNoise", "OrnsteinUhlenbeckNoise", "StochasticSampling")

#: Every key an exploration_config may hold; the defaults are RLlib's.
EXPLORATION_KEYS = {"type", "random_timesteps", "stddev", "initial_scale", "final_scale",
                    "scale_timesteps", "ou_base_scale", "ou_theta", "ou_sigma"}


def exploration_problems(cfg: dict) -> list[str]:
    """What is wrong with an ``exploration_config``, one line each."""
    problems = []
    unknown = sorted(set(cfg) - EXPLORATION_KEYS)
    if unknown:
        problems.append(f"exploration_config: unknown keys {unknown}; valid: "
                        f"{sorted(EXPLORATION_KEYS)}")
    if cfg.get("type") not in NOISE_TYPES:
        problems.append(f"exploration_config: type {cfg.get('type')!r} is none of {NOISE_TYPES}")
    for key in ("random_timesteps", "stddev", "scale_timesteps", "ou_base_scale", "ou_sigma"):
        if key in cfg and not cfg[key] >= 0:
            problems.append(f"exploration_config: {key} must be >= 0, got {cfg[key]!r}")
    return problems


def action_bounds(action_space: gym.Space, config: Any) -> tuple[np.ndarray, np.ndarray]:
    """Where the actor's actions live: [-1, 1] when the runners rescale actions to the Box
    (``normalize_actions``, the default), else the Box's own bounds."""
    dim = int(np.prod(action_space.shape))
    squash = bool(config.model.get("squash_actions", False))
    if config.normalize_actions and not squash:
        return -np.ones(dim, np.float32), np.ones(dim, np.float32)
    low, high = np.asarray(action_space.low).reshape(-1), np.asarray(action_space.high).reshape(-1)
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
        raise ValueError(f"the actor needs finite action bounds, {action_space} has infinite "
                         "ones; set normalize_actions=True or give the Box finite bounds")
    return low.astype(np.float32), high.astype(np.float32)


def uniform_actions(rng: np.random.Generator, low: np.ndarray, high: np.ndarray,
                    n: int) -> np.ndarray:
    return rng.uniform(low, high, size=(n, len(low))).astype(np.float32)


class ActionNoise:
    """Turns a batch of deterministic actions ``[N, d]`` into exploring ones, counting the
    steps it has acted (RLlib counts per runner too). The noise is in units of the action
    range: with actions in [-1, 1], ``stddev`` 0.1 is stable-baselines3's ``sigma`` 0.1.
    Its scale goes linearly from ``initial_scale`` to ``final_scale`` over
    ``scale_timesteps`` once the random steps are over."""

    def __init__(self, cfg: dict, low: np.ndarray, high: np.ndarray, seed: int | None = None):
        self.cfg = cfg
        self.low, self.high = np.asarray(low, np.float32), np.asarray(high, np.float32)
        self.rng = np.random.default_rng(seed)
        self.timestep = 0
        self.ou_state: np.ndarray | None = None  # one process per env of the runner

    def seed(self, seed: int | None) -> None:
        self.rng = np.random.default_rng(seed)

    def scale(self) -> float:
        cfg = self.cfg
        start, end = cfg.get("initial_scale", 1.0), cfg.get("final_scale", 1.0)
        span = max(cfg.get("scale_timesteps", 1), 1)
        frac = min(max(self.timestep - cfg.get("random_timesteps", 0), 0) / span, 1.0)
        return start + frac * (end - start)

    def random_phase(self) -> bool:
        return self.timestep < self.cfg.get("random_timesteps", 0)

    def __call__(self, actions: np.ndarray) -> np.ndarray:
        n = len(actions)
        random = self.random_phase()
        self.timestep += n
        if random:
            return uniform_actions(self.rng, self.low, self.high, n)
        kind = self.cfg["type"]
        if kind == "StochasticSampling":
            return actions
        width = self.high - self.low
        if kind == "GaussianNoise":
            std = self.cfg.get("stddev", 0.1)
            noise = self.rng.normal(0.0, std, size=actions.shape) * width / 2
        else:
            noise = self._ou_step(actions.shape) * width
        noisy = actions + self.scale() * noise
        return np.clip(noisy, self.low, self.high).astype(np.float32)

    def _ou_step(self, shape: tuple[int, ...]) -> np.ndarray:
        """One step of an Ornstein-Uhlenbeck process per env, mean-reverting to 0
        (theta), driven by N(0, sigma); scaled by ``ou_base_scale``."""
        cfg = self.cfg
        if self.ou_state is None or self.ou_state.shape != shape:
            self.ou_state = np.zeros(shape, np.float32)
        self.ou_state += (-cfg.get("ou_theta", 0.15) * self.ou_state
                          + cfg.get("ou_sigma", 0.2) * self.rng.standard_normal(shape))
        return cfg.get("ou_base_scale", 0.1) * self.ou_state

    def get_state(self) -> dict[str, Any]:
        return {"timestep": self.timestep}
