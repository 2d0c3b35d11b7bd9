"""RLlib's ``ray.rllib.core.learner.torch``: rlmesh's learner is a torch learner."""
