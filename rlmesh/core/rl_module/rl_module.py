"""RLlib's ``ray.rllib.core.rl_module.rl_module`` (rlmesh/models/rl_module.py)."""

from rlmesh.models.rl_module import (DEFAULT_MODULE_ID, RLModule, RLModuleSpec,
                                     SingleAgentRLModuleSpec)

__all__ = ["DEFAULT_MODULE_ID", "RLModule", "RLModuleSpec", "SingleAgentRLModuleSpec"]
