"""RLlib's ``ray.rllib.core.learner.learner.Learner``: rlmesh's learner itself
(``rlmesh.roles.learner.Learner``), not a copy. Subclass it and name the subclass in
``config.training(learner_class=...)``; its hooks: rlmesh/roles/learner_hooks.py."""

from rlmesh.roles.learner import Learner

#: rlmesh's learners are torch learners: RLlib's ``TorchLearner`` is the same class.
TorchLearner = Learner

__all__ = ["Learner", "TorchLearner"]
