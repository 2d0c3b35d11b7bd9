"""``from ray.rllib.utils.policy_client import PolicyClient`` as seed 000 writes it: today's
spelling is ``from rlmesh.client import PolicyClient`` (the same class; an http:// address
talks to the policy server's HTTP front, tcp:// to its ZeroMQ socket)."""

from rlmesh.client import PolicyClient, PolicyServerError, PolicyServerUnavailable

__all__ = ["PolicyClient", "PolicyServerError", "PolicyServerUnavailable"]
