"""SimpleQConfig: RLlib's SimpleQ, plain DQN -- no double Q, no dueling, uniform replay,
one-step targets, the Q head straight on the fcnet_hiddens trunk -- as DQN's settings with
those defaults."""

from __future__ import annotations

from dataclasses import dataclass

from rlmesh.algorithms.dqn_config import DQNConfig, _rllib_dqn
from rlmesh.algorithms.off_policy_config import REPLAY_DEFAULTS
from rlmesh.rl.spec import MODEL_DEFAULTS

# RLlib's SimpleQConfig.__init__ values (its other ones equal DQN's), and the plain Q
# network its SimpleQTorchPolicy builds: the default fcnet with one output per action. DQN's
# other settings take RLlib's values too, not rlmesh's tuned DQN defaults.
_SIMPLE_Q_DEFAULTS = {
    **_rllib_dqn(),
    "double_q": False,
    "dueling": False,
    "hiddens": [],
    "n_step": 1,
    "noisy": False,
    "num_atoms": 1,
    "replay_buffer_config": {**REPLAY_DEFAULTS, "type": "MultiAgentReplayBuffer",
                             "capacity": 50_000},
    "model": dict(MODEL_DEFAULTS),
}


@dataclass(kw_only=True)
class SimpleQConfig(DQNConfig, defaults=_SIMPLE_Q_DEFAULTS):
    """Simple Q-learning (RLlib's ``run: SimpleQ``): DQN's loss on a plain Q network with a
    target network and a uniform replay buffer::

        SimpleQConfig().environment("CartPole-v1").training(lr=1e-3)

    DQN's extensions (double_q, dueling, n_step, prioritized replay, noisy, num_atoms) stay
    settable, as in DQNConfig, but are off.
    """

    algorithm_path = "rlmesh.algorithms.simple_q:SimpleQ"
