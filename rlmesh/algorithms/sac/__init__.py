"""SAC (rlmesh/algorithms/sac/sac.py: the algorithm, its policy and losses) and, as in
RLlib's ``ray.rllib.algorithms.sac``, its default RLModule under ``torch/``. The code is
not in this file, where the ``torch`` subpackage would shadow the global ``torch``."""

from rlmesh.algorithms.sac.sac import SAC, SACConfig, SACTorchPolicy, auto_target_entropy

__all__ = ["SAC", "SACConfig", "SACTorchPolicy", "auto_target_entropy"]
