"""``ray.rllib.utils.policy_server.PolicyServer``, RLlib's HTTP server thread inside an
``ExternalEnv``: rlmesh serves clients from the algorithm itself instead, so the old class is
one line naming that spelling (see ``PolicyServer``)."""

from __future__ import annotations

from typing import Any

TODAY = ("rlmesh serves PolicyClients from the algorithm itself, not from an ExternalEnv: "
         "config.environment(observation_space=..., action_space=...).env_runners("
         "policy_server_address='http://127.0.0.1:9900') and algo.train() "
         "(docs/api/client.md); rlmesh serve CHECKPOINT --address http://127.0.0.1:9900 "
         "serves a trained policy")


class PolicyServer:
    """Refused in one line: ``policy_server_address`` in the config is today's spelling."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(TODAY)
