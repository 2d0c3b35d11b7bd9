"""The numpy fast path: the runner side of ``TorchPolicy`` with the default MLP, computed by
``rlmesh.rl.numpy_policy.NumpyPolicy`` from the same weights, so a runner process acting with
it never imports torch (0.3 s and 40 MB per process instead of 1.7 s and 200 MB)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from rlmesh.policy.policy import Policy
from rlmesh.rl.columns import Columns, action_dist_columns
from rlmesh.rl.numpy_policy import NumpyPolicy


class NumpyMLPPolicy(Policy):
    """Acts as the default model does (same weights, same distributions); runners only."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, config: Any) -> None:
        super().__init__(observation_space, action_space, config)
        self.net = NumpyPolicy(observation_space, action_space, config.model, config.explore)
        self.view_requirements = action_dist_columns(self.net.num_inputs)

    @property
    def num_inputs(self) -> int:
        return self.net.num_inputs

    def seed(self, seed: int | None) -> None:
        self.net.rng = np.random.default_rng(seed)

    def compute_actions(self, obs_batch: np.ndarray, state_batches: Any = None,
                        prev_action_batch: Any = None, prev_reward_batch: Any = None,
                        explore: bool | None = None, timestep: int | None = None,
                        noise: np.ndarray | None = None,
                        **kwargs: Any) -> tuple[np.ndarray, list[np.ndarray], dict[str, np.ndarray]]:
        actions, logp, inputs = self.net(obs_batch, explore, noise)
        return actions, [], {Columns.ACTION_LOGP: logp, Columns.ACTION_DIST_INPUTS: inputs}

    compute_actions.takes_held_noise = True  # noise: a Gaussian's draws the sampler holds

    def score_actions(self, obs_batch: np.ndarray, actions: np.ndarray) -> dict[str, np.ndarray]:
        inputs = self.net.dist_inputs(obs_batch)
        return {Columns.ACTION_LOGP: self.net.logp(inputs, actions),
                Columns.ACTION_DIST_INPUTS: inputs}

    def get_weights(self) -> dict[str, np.ndarray]:
        return self.net.get_weights()

    def set_weights(self, weights: dict[str, Any]) -> None:
        self.net.set_weights(weights)
