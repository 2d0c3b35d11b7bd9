"""RLlib's ``ray.rllib.utils.torch_utils`` names that custom losses and stats functions use
(``explained_variance`` in a ``stats_fn``): today's ``rlmesh.policy.learner_stats``."""

from rlmesh.policy.learner_stats import explained_variance

__all__ = ["explained_variance"]
