"""ARS (Mania et al. 2018, ARS v2): ES's plumbing (runners, noise table, no learner process)
with a linear policy on normalised observations, ``num_rollouts`` directions per iteration
and an SGD step along the ``rollouts_used`` best (``rlmesh.policy.es_policy.ARSPolicy``)."""

from __future__ import annotations

from rlmesh.algorithms.ars_config import ARSConfig
from rlmesh.algorithms.es import ES
from rlmesh.policy.es_policy import ARSPolicy

__all__ = ["ARS", "ARSConfig", "ARSPolicy"]


class ARS(ES):
    """Each iteration: ``num_rollouts`` mirrored pairs over the runners, one step."""

    config_class = ARSConfig
    default_policy_class = ARSPolicy

    def batch_target(self) -> tuple[int, int]:
        return self.config.num_rollouts, 0
