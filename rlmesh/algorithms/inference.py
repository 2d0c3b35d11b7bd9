"""A policy for acting only: the model on the CPU and its action distribution, no processes.

The driver keeps one in step with the newest weights for ``compute_single_action``;
``rlmesh rollout`` loads one straight from a checkpoint without starting a mesh.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlmesh.algorithms import checkpoints
from rlmesh.algorithms.config import AlgorithmConfig
from rlmesh.envs import actions_for_env, env_registry, import_object, spaces_of
from rlmesh.rl.distributions import distribution_for
from rlmesh.rl.models import build_model


class InferencePolicy:
    """``compute_single_action`` from a model and the config it was trained with."""

    def __init__(self, config: AlgorithmConfig, obs_space: Any, action_space: Any) -> None:
        self.config = config
        self.obs_space, self.action_space = obs_space, action_space
        self.model = build_model(obs_space, action_space, config.model)
        self.squash = bool(config.model.get("squash_actions", False))
        self.dist_cls = distribution_for(action_space, self.squash)[0]

    @classmethod
    def from_checkpoint(cls, path: str | Path) -> "InferencePolicy":
        meta, state = checkpoints.read(Path(path))
        config = import_object(meta["algorithm"]).config_class.from_dict(meta["config"])
        obs_space, action_space = spaces_of(meta["config"]["env"], config.env_config,
                                            env_registry())
        policy = cls(config, obs_space, action_space)
        policy.model.load_state_dict(state["model"])
        return policy

    def compute_single_action(self, observation: Any, explore: bool = False) -> Any:
        obs = torch.as_tensor(np.asarray(observation, dtype=self.obs_space.dtype)[None])
        with torch.no_grad():
            dist_inputs, _ = self.model(obs)
            dist = self.dist_cls.from_inputs(dist_inputs)
            action = (dist.sample() if explore else dist.deterministic_sample())[0].numpy()
        if action.ndim == 0:
            return int(action)
        # Squashed actions are in the bounds already (as the env runner steps them).
        return actions_for_env(action, self.action_space,
                               self.config.normalize_actions and not self.squash)

    def stop(self) -> None:
        """Nothing to stop (the same call as an Algorithm's, for code that takes either)."""
