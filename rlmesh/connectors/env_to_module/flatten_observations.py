"""RLlib's module path of FlattenObservations (observation_builtins.py)."""

from rlmesh.connectors.env_to_module.observation_builtins import FlattenObservations

__all__ = ["FlattenObservations"]
