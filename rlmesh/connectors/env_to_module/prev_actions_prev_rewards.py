"""RLlib's module path of PrevActionsPrevRewards (observation_builtins.py)."""

from rlmesh.connectors.env_to_module.observation_builtins import PrevActionsPrevRewards

__all__ = ["PrevActionsPrevRewards"]
