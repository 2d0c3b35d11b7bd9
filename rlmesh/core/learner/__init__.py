"""RLlib's ``ray.rllib.core.learner``: the public ``Learner`` (rlmesh's learner,
``rlmesh.roles.learner.Learner``, with RLlib's hooks) and ``LearnerGroup``
(``rlmesh.driver.learner_group``). docs/learner.md documents them."""

from rlmesh.core.learner.learner import Learner, TorchLearner
from rlmesh.driver.learner_group import LearnerGroup

__all__ = ["Learner", "LearnerGroup", "TorchLearner"]
