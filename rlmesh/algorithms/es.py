"""OpenAI-ES (Salimans et al. 2017): the runners evaluate mirrored perturbations of the
policy's flat parameters and send back (noise index, returns, lengths); the driver ranks the
returns, estimates the gradient from the shared noise table and takes an Adam step. No
learner process: the policy's ``update`` runs in the driver (``rlmesh.policy.es_policy``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rlmesh.driver.algorithm import Algorithm
from rlmesh.algorithms.es_config import ESConfig
from rlmesh.driver.es_mesh import ESMesh
from rlmesh.policy.es_policy import ESPolicy
from rlmesh.rl.columns import DEFAULT_POLICY_ID

__all__ = ["ES", "ESConfig", "ESPolicy", "join_rollouts"]

CHUNKS = 4  # calls per runner per iteration: a runner killed mid-call loses 1/4 of its share


def join_rollouts(replies: list[dict[str, Any]]) -> dict[str, Any]:
    """The runners' replies as one batch, and the evaluation episodes for the results."""
    def cat(key: str, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        parts = [np.asarray(r[key]).reshape(-1, *shape) for r in replies]
        return np.concatenate(parts) if parts else np.zeros((0, *shape), dtype)

    episodes = [{"return": float(ret), "length": int(n)}
                for r in replies for ret, n in zip(r["eval_returns"], r["eval_lengths"])]
    return {"noise_indices": cat("noise_indices", (), np.int64),
            "returns": cat("returns", (2,), np.float32),
            "lengths": cat("lengths", (2,), np.int32),
            "env_steps": sum(int(r["env_steps"]) for r in replies), "episodes": episodes}


class ES(Algorithm):
    """Each iteration: at least ``episodes_per_batch`` perturbed episodes and
    ``train_batch_size`` env steps over the runners, one step of the parameters in the
    driver, the new parameters published to the param server."""

    config_class = ESConfig
    default_policy_class = ESPolicy
    mesh_class = ESMesh
    mesh: ESMesh

    def batch_target(self) -> tuple[int, int]:
        """Mirrored pairs and env steps an iteration evaluates at least."""
        return math.ceil(self.config.episodes_per_batch / 2), self.config.train_batch_size

    def training_step(self) -> dict[str, dict[str, float]]:
        with self.timer("sample_time_s"):
            pairs, steps = self.batch_target()
            batch = join_rollouts(self.mesh.runners.rollouts(pairs, steps, CHUNKS))
        # The results count every env step; their episodes are the evaluation episodes.
        self.env_runners.record([{"env_steps": batch["env_steps"], "episodes": batch["episodes"]}])
        with self.timer("learn_time_s"):
            stats = self.learner_group.update_from_batch(
                {DEFAULT_POLICY_ID: {k: batch[k] for k in ("noise_indices", "returns", "lengths")}},
                timesteps=self.timesteps_sampled)
        self.env_runners.sync_weights()
        return stats
