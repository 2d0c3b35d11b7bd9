"""RLlib's ``ray.rllib.core`` names on rlmesh's classes (``rlmesh.core.learner``)."""
