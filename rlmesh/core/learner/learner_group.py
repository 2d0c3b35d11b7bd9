"""RLlib's ``ray.rllib.core.learner.learner_group.LearnerGroup``: rlmesh's
(``rlmesh.driver.learner_group.LearnerGroup``, ``algo.learner_group``)."""

from rlmesh.driver.learner_group import LearnerGroup

__all__ = ["LearnerGroup"]
