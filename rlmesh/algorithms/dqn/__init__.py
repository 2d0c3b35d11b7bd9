"""DQN (rlmesh/algorithms/dqn/dqn.py: the algorithm, its policy, the Q network and loss)
and, as in RLlib's ``ray.rllib.algorithms.dqn``, its default RLModule under ``torch/``.

The code lives in ``dqn.py``, not here: once ``rlmesh.algorithms.dqn.torch`` is imported,
this package's name ``torch`` is that subpackage, which would shadow the global ``torch``
of code written in this file."""

from rlmesh.algorithms.dqn.dqn import (NUMPY_RUNNER, DQN, DQNConfig, DQNTorchPolicy, QModel,
                                       check_discrete, q_logits, q_values, taken_rows)

__all__ = ["DQN", "DQNConfig", "DQNTorchPolicy", "NUMPY_RUNNER", "QModel", "check_discrete",
           "q_logits", "q_values", "taken_rows"]
