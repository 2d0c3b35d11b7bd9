# RLlib's ray.rllib.agents.dqn.dqn: its names and docstring come from the table in _exports.py.
from rlmesh.agents._exports import exports

__doc__, __getattr__, __all__ = exports(__name__)
