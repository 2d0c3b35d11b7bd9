"""RLlib's ``ray.rllib.algorithms.dqn.torch.default_dqn_torch_rl_module`` (the class:
rlmesh/models/default_modules.py), with the output keys of RLlib's DQN modules."""

from rlmesh.models.default_modules import (ATOMS, QF_LOGITS, QF_PREDS, QF_PROBS,
                                           DefaultDQNTorchRLModule)

__all__ = ["ATOMS", "DefaultDQNTorchRLModule", "QF_LOGITS", "QF_PREDS", "QF_PROBS"]
