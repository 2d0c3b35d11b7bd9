"""RLlib's module path of MeanStdFilter (observation_builtins.py)."""

from rlmesh.connectors.env_to_module.observation_builtins import MeanStdFilter

__all__ = ["MeanStdFilter"]
