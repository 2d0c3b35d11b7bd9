"""DQN's Q network (``QModel``): an observation encoder, the ``fcnet_hiddens`` trunk, and
dueling, noisy and distributional (C51) heads. DQN's policy (algorithms/dqn/dqn.py) and its
default RLModule (models/default_modules.py: DefaultDQNTorchRLModule) build it."""

from __future__ import annotations

import gymnasium as gym
import torch
from torch import nn

from rlmesh.rl import distributional
from rlmesh.rl.actor_q import hidden_layers
from rlmesh.rl.encoders import ObsEncoder
from rlmesh.rl.layers import ACTIVATIONS
from rlmesh.rl.noisy import linear, noisy_layers
from rlmesh.rl.spec import MODEL_DEFAULTS

__all__ = ["QModel"]


class QModel(nn.Module):
    """obs -> (Q-values ``[N, num_actions]``, max Q ``[N]``): an observation encoder, the
    ``fcnet_hiddens`` trunk, then an advantage branch (``hiddens``, ReLU) and, dueling, a
    value branch: Q = V + A - mean(A). The second output makes it read like the default
    model (distribution inputs, value) wherever a model is only run.

    Distributional (``num_atoms`` > 1): the heads give logits ``[N, num_actions, num_atoms]``
    (dueling: V's atoms plus A's, A's mean over actions taken per atom, as RLlib) over the
    ``support`` buffer (``v_min`` .. ``v_max``, in the weights so that runners read it), and
    Q is their expectation."""

    def __init__(self, obs_space: gym.Space, num_actions: int, model_config: dict,
                 hiddens: list[int], dueling: bool, noisy: bool = False,
                 sigma0: float = 0.5, num_atoms: int = 1, v_min: float = -10.0,
                 v_max: float = 10.0) -> None:
        super().__init__()
        self.num_actions, self.num_atoms = num_actions, num_atoms
        config = {**MODEL_DEFAULTS, **model_config}
        self.encoder = ObsEncoder(obs_space, config, ACTIVATIONS[config["conv_activation"]])
        trunk = list(config["fcnet_hiddens"]) + list(config["post_fcnet_hiddens"])
        # torch's default initialisation, as stable-baselines3's QNetwork: with the
        # actor-critic MLP's orthogonal one (gain sqrt 2) the tuned CartPole example learned
        # slower and fell back (docs/benchmark_log.md, issue 18).
        self.trunk, size = hidden_layers(self.encoder.out_size, trunk, config["fcnet_activation"])
        # Noisy: the branches and heads only, as RLlib's DQN (the trunk stays plain).
        self.a_branch, a_size = noisy_layers(size, list(hiddens), noisy, sigma0)
        self.a_head = linear(a_size, num_actions * num_atoms, noisy, sigma0)
        self.dueling = dueling
        if dueling:
            self.v_branch, v_size = noisy_layers(size, list(hiddens), noisy, sigma0)
            self.v_head = linear(v_size, num_atoms, noisy, sigma0)
        if num_atoms > 1:
            self.register_buffer("support", distributional.support(num_atoms, v_min, v_max))

    def q_logits(self, obs: torch.Tensor) -> torch.Tensor:
        """Q-values ``[N, A]``, or distributional: the logits ``[N, A, num_atoms]``."""
        x = self.trunk(self.encoder(obs))
        a = self.a_head(self.a_branch(x))
        if self.num_atoms > 1:
            a = a.unflatten(-1, (self.num_actions, self.num_atoms))
        if not self.dueling:
            return a
        v = self.v_head(self.v_branch(x))  # [N, 1], or [N, num_atoms]
        v = v.unsqueeze(1) if self.num_atoms > 1 else v
        return v + a - a.mean(1, keepdim=True)

    def q_values(self, obs: torch.Tensor) -> torch.Tensor:
        out = self.q_logits(obs)
        return distributional.expected_q(out, self.support) if self.num_atoms > 1 else out

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q = self.q_values(obs)
        return q, q.max(-1).values
