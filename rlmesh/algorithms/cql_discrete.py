"""Discrete CQL (Kumar et al. 2020, their Q-learning variant): DQN's loss on the dataset's
transitions (double Q, n-step, Huber) plus the conservative term, exact over the actions,

    min_q_weight x mean_s (temperature x logsumexp_a (Q(s, a) / temperature) - Q(s, a_data)).

``CQL`` picks it for a Discrete action space; its settings are CQLConfig's (the Q network
from ``q_model_config``, its learning rate ``critic_learning_rate``)."""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium as gym
import torch

from rlmesh.algorithms.dqn import DQNTorchPolicy
from rlmesh.algorithms.dqn_config import DQNConfig
from rlmesh.algorithms.off_policy_config import OffPolicyConfig
from rlmesh.policy.policy import class_path

__all__ = ["DiscreteCQLTorchPolicy", "dqn_view"]

Tensors = dict[str, torch.Tensor]


def dqn_view(config: Any) -> DQNConfig:
    """The DQN settings the discrete loss reads, from a CQLConfig: the off-policy settings
    both share as they are; the Q network the q_model_config's MLP with a plain Q head
    (no dueling branches), trained at critic_learning_rate, double Q."""
    view = DQNConfig()
    for f in dataclasses.fields(OffPolicyConfig):
        setattr(view, f.name, getattr(config, f.name))
    q = config.q_model_config
    view.model = {**config.model, "fcnet_hiddens": list(q["fcnet_hiddens"]),
                  "fcnet_activation": q["fcnet_activation"]}
    view.lr = config.optimization_config["critic_learning_rate"]
    view.lr_schedule = None
    view.hiddens, view.dueling, view.double_q = [], False, True
    return view


class DiscreteCQLTorchPolicy(DQNTorchPolicy):
    """DQN's Q network and loss, built from CQL's settings (``dqn_view``), plus the
    conservative term."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, config: Any,
                 device: str | torch.device = "cpu") -> None:
        self.cql_config = config
        super().__init__(observation_space, action_space, dqn_view(config), device)
        self._q_obs: torch.Tensor | None = None

    @classmethod
    def runner_class(cls, config: Any, observation_space: gym.Space | None = None,
                     action_space: gym.Space | None = None) -> str:
        # The numpy Q runner would read CQL's settings as DQN's: this class acts (greedy,
        # in evaluation) from its own view of them.
        return class_path(cls)

    def online_q(self, mb: Tensors) -> tuple[torch.Tensor, torch.Tensor | None]:
        q, q_next = super().online_q(mb)
        self._q_obs = q  # DQN's loss computes Q(s, .) once; the conservative term reuses it
        return q, q_next

    def loss(self, mb: Tensors) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        td_loss, stats = super().loss(mb)
        cfg, q = self.cql_config, self._q_obs
        self._q_obs = None
        t = cfg.temperature
        q_data = q.gather(1, mb["actions"].long().unsqueeze(1)).squeeze(1)
        gap = (t * torch.logsumexp(q / t, 1) - q_data).mean()
        conservative = cfg.min_q_weight * gap
        total = td_loss + conservative
        return total, {**stats, "td_loss": td_loss.detach(), "total_loss": total.detach(),
                       "cql_gap": gap.detach(), "cql_loss": conservative.detach()}
