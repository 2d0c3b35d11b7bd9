"""RLlib's ``ray.rllib.core.rl_module.multi_rl_module`` (rlmesh/models/rl_module.py)."""

from rlmesh.models.rl_module import (MultiAgentRLModule, MultiAgentRLModuleSpec,
                                           MultiRLModule, MultiRLModuleSpec)

__all__ = ["MultiAgentRLModule", "MultiAgentRLModuleSpec", "MultiRLModule", "MultiRLModuleSpec"]
