"""RLlib's old ``ray.rllib.utils`` module paths that seed 000 names, as aliases of today's
rlmesh spellings (``rlmesh.utils.policy_client`` is ``rlmesh.client``)."""
