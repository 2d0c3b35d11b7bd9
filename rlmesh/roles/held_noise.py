"""Held exploration noise (``noise_hold_steps``): each env's standard-normal draw for a
Gaussian policy, kept for several steps and redrawn when its episode starts.

The samplers own it because they know the envs and their episodes; the policy takes the
draws as ``compute_actions(..., noise=)`` and acts ``mean(s) + std(s) * noise``. Each step's
action is therefore still a draw of the policy's Gaussian at that state, and the logp the
runner records is its density there; only the draws' correlation in time changes.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from rlmesh.roles.runner_policy import takes_held_noise

#: Added to a runner's env seed to seed its noise, so the draws differ from the envs' own.
NOISE_SEED_TAG = 7


class HeldNoise:
    """Draws ``[num_envs, d]`` held ``hold`` steps per env; ``restart(envs)`` at episode
    starts. ``for_space`` gives None where there is nothing to hold (``hold`` 1, or
    actions that are not a Box)."""

    def __init__(self, num_envs: int, dim: int, hold: int, seed: int | None = None) -> None:
        if hold < 2:
            raise ValueError(f"noise_hold_steps: HeldNoise holds draws 2 steps or more, got {hold}")
        self.hold = int(hold)
        self.noise = np.zeros((num_envs, dim), np.float32)
        self.age = np.zeros(num_envs, np.int64)  # steps each env's draw has been used
        self.rng = np.random.default_rng(None if seed is None else [seed, NOISE_SEED_TAG])

    @classmethod
    def for_space(cls, action_space: gym.Space, num_envs: int, hold: int,
                  seed: int | None = None) -> "HeldNoise | None":
        if hold <= 1 or not isinstance(action_space, gym.spaces.Box):
            return None
        return cls(num_envs, int(np.prod(action_space.shape)), hold, seed)

    def check(self, policy: Any) -> None:
        """Refuse a policy whose ``compute_actions`` would ignore the draws."""
        if not takes_held_noise(policy):
            raise ValueError(
                f"noise_hold_steps={self.hold}: {type(policy).__name__}.compute_actions draws "
                "its own actions (held noise is taken by rlmesh's TorchPolicy and its numpy "
                "policy for the default model); set noise_hold_steps=1")

    def restart(self, envs: Any) -> None:
        """Envs ``envs`` (an index, slice or list) start an episode: fresh draws next step."""
        self.age[envs] = 0

    def draws(self, envs: Any) -> np.ndarray:
        """This step's draws for envs ``envs`` (a slice or a list of indices), redrawn
        where an env's draw is ``hold`` steps old or its episode just started."""
        rows = np.arange(len(self.age))[envs]
        due = rows[self.age[rows] % self.hold == 0]
        if due.size:
            self.noise[due] = self.rng.standard_normal((due.size, self.noise.shape[1]),
                                                       dtype=np.float32)
        self.age[rows] += 1
        return self.noise[rows]
