"""RLlib's ``ray.rllib.core.rl_module``: RLModules (rlmesh/models/rl_module.py and its
neighbours hold them; docs/new_api_stack.md)."""

from rlmesh.models.rl_module import (MultiAgentRLModule, MultiAgentRLModuleSpec,
                                           MultiRLModule, MultiRLModuleSpec)
from rlmesh.models.rl_module import RLModule, RLModuleSpec, SingleAgentRLModuleSpec

__all__ = ["MultiAgentRLModule", "MultiAgentRLModuleSpec", "MultiRLModule", "MultiRLModuleSpec",
           "RLModule", "RLModuleSpec", "SingleAgentRLModuleSpec"]
