"""Embed rlmesh in a simulator that owns its main loop: ``PolicyClient`` asks a policy
server for actions (or computes them locally) and reports rewards and episode ends.

Importing this and using remote inference loads pyzmq, msgpack and numpy only. An http://
or https:// address talks to a server's HTTP front (the standard library's http.client).
"""

from rlmesh.client.client import PolicyClient, PolicyServerError, PolicyServerUnavailable
from rlmesh.client.keys import (curve_client_options, make_curve_keys, make_http_token,
                                read_http_token)
from rlmesh.client.multi_agent_client import MultiAgentPolicyClient

__all__ = ["MultiAgentPolicyClient", "PolicyClient", "PolicyServerError", "PolicyServerUnavailable",
           "curve_client_options", "make_curve_keys", "make_http_token", "read_http_token"]
