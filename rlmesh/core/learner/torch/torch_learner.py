"""RLlib's ``ray.rllib.core.learner.torch.torch_learner.TorchLearner``: rlmesh's
``Learner`` (rlmesh.roles.learner), whose policies are torch policies."""

from rlmesh.core.learner.learner import Learner, TorchLearner

__all__ = ["Learner", "TorchLearner"]
