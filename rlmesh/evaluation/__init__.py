"""RLlib's ``ray.rllib.evaluation`` names that rlmesh keeps: ``postprocessing``
(``compute_advantages``, ``Postprocessing``) over rlmesh's own GAE code."""
