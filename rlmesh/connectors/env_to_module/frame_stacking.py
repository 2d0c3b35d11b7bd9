"""RLlib's module path of FrameStackingEnvToModule (observation_builtins.py)."""

from rlmesh.connectors.env_to_module.observation_builtins import FrameStackingEnvToModule

__all__ = ["FrameStackingEnvToModule"]
