"""IQL (Kostrikov et al. 2021), implicit Q-learning from a dataset alone: no action outside
the data is ever evaluated. Three regressions on the dataset's transitions (s, a, r, s'):

- V(s) toward min Q'(s, a) by expectile regression (weight ``expectile`` on errors above,
  1 - expectile below): an upper expectile of the data's action values at s;
- Q(s, a) toward r + gamma^n V(s');
- the actor by advantage-weighted regression: maximise exp(beta (Q'(s, a) - V(s))) x
  log pi(a|s) on the data's actions, the weight capped at 100.

Each loss reaches only its own network, so one backward pass serves all three. Box actions
act with SAC's squashed Gaussian (its mode when evaluated), Discrete ones with a categorical.
The dataset is the replay (``offline_replay.py``); evaluation runners play the policy.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlmesh.algorithms.actor_critic_replay import OwnRates, StochasticActorPolicy
from rlmesh.algorithms.ddpg import bootstrap_discount, td_loss
from rlmesh.algorithms.iql_config import IQLConfig
from rlmesh.algorithms.offline_replay import OfflineReplay
from rlmesh.config.base import ConfigError
from rlmesh.rl.actor_q import StochasticActor, TwinQ, encoder_for, hidden_layers
from rlmesh.rl.optim import Adam

__all__ = ["IQL", "IQLConfig", "IQLTorchPolicy", "expectile_loss"]

Tensors = dict[str, torch.Tensor]
MAX_WEIGHT = 100.0  # exp(beta * A) capped: one overestimated advantage cannot dominate


def expectile_loss(diff: torch.Tensor, expectile: float) -> torch.Tensor:
    """Asymmetric squared error per element: |expectile - 1(diff < 0)| x diff^2 (at 0.5,
    half the squared error)."""
    weight = torch.where(diff > 0, expectile, 1.0 - expectile)
    return weight * diff.pow(2)


class ValueNet(nn.Module):
    """obs -> V(s) ``[N]``: the observation encoder, an MLP, one output."""

    def __init__(self, obs_space: gym.Space, hiddens: list[int], activation: str,
                 model_config: dict | None = None):
        super().__init__()
        self.encoder = encoder_for(obs_space, model_config)
        self.trunk, out = hidden_layers(self.encoder.out_size, hiddens, activation)
        self.head = nn.Linear(out, 1)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.head(self.trunk(self.encoder(obs))).squeeze(-1)


class IQLTorchPolicy(StochasticActorPolicy):
    """The actor, the Q network(s) (their target: ``target_model``) and V, in ``model``,
    with one Adam each (actor_lr, critic_lr, value_lr)."""

    rate_keys = ("cur_actor_lr", "cur_critic_lr", "cur_value_lr")

    def make_model(self) -> nn.Module:
        cfg = self.config
        hiddens, act = cfg.model["fcnet_hiddens"], cfg.model["fcnet_activation"]
        outputs = int(self.action_space.n) if self.discrete else 2 * len(self.low)
        return nn.ModuleDict({
            "actor": StochasticActor(self.observation_space, outputs, hiddens, act, cfg.model),
            "q": TwinQ(self.observation_space, self.action_space, hiddens, act, cfg.twin_q,
                       cfg.model),
            "v": ValueNet(self.observation_space, hiddens, act, cfg.model)})

    def make_optimizer(self) -> Any:
        cfg, m = self.config, self.model
        return OwnRates(Adam(m["actor"].parameters(), lr=cfg.actor_lr),
                        Adam(m["q"].parameters(), lr=cfg.critic_lr),
                        Adam(m["v"].parameters(), lr=cfg.value_lr))

    def target_modules(self) -> nn.Module:
        return self.model["q"]  # V and the actor have no targets in IQL

    # --- runner side ---

    def compute_actions(self, obs_batch: np.ndarray, state_batches: Any = None,
                        prev_action_batch: Any = None, prev_reward_batch: Any = None,
                        explore: bool | None = None, timestep: int | None = None,
                        **kwargs: Any) -> tuple[np.ndarray, list, dict]:
        explore = self.config.explore if explore is None else explore
        with torch.no_grad():
            inputs = self.model["actor"](torch.as_tensor(np.asarray(obs_batch),
                                                         device=self.device))
            dist = self.dist_class.from_inputs(inputs)
            actions = dist.sample() if explore else dist.deterministic_sample()
        return actions.cpu().numpy().astype(self.action_dtype, copy=False), [], {}

    # --- learner side ---

    def _q_of_data(self, qs: list[torch.Tensor], actions: torch.Tensor) -> list[torch.Tensor]:
        """Each critic's Q(s, a_data): Discrete critics give Q(s, .), gathered here."""
        if not self.discrete:
            return qs
        index = actions.long().reshape(-1, 1)
        return [q.gather(1, index).squeeze(1) for q in qs]

    def loss(self, mb: Tensors) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        cfg, m = self.config, self.model
        obs, actions = mb["obs"], mb["actions"]
        q_actions = None if self.discrete else actions.reshape(len(actions), -1)
        with torch.no_grad():
            q_target = torch.stack(self._q_of_data(self.target_model(obs, q_actions),
                                                   actions)).min(0).values
            target = mb["rewards"] + bootstrap_discount(self, mb) * m["v"](mb["next_obs"])
        v = m["v"](obs)
        advantage = q_target - v
        value_loss = expectile_loss(advantage, cfg.expectile).mean()
        weights = torch.exp(cfg.beta * advantage.detach()).clamp(max=MAX_WEIGHT)
        logp = self.dist_class.from_inputs(m["actor"](obs)).logp(actions)
        actor_loss = -(weights * logp).mean()
        qs = self._q_of_data(m["q"](obs, q_actions), actions)
        critic_loss = sum(td_loss(q - target, mb.get("weights"), None) for q in qs)
        total = value_loss + critic_loss + actor_loss
        return total, {"value_loss": value_loss.detach(), "critic_loss": critic_loss.detach(),
                       "actor_loss": actor_loss.detach(), "mean_q": qs[0].detach().mean(),
                       "mean_v": v.detach().mean(), "mean_weight": weights.mean(),
                       "td_error": (qs[0] - target).detach()}


class IQL(OfflineReplay):
    """IQL from ``input``: the dataset's transitions replayed, the policy evaluated in the
    env."""

    config_class = IQLConfig
    default_policy_class = IQLTorchPolicy

    def check_spaces(self, obs_space: gym.Space, action_space: gym.Space) -> None:
        if not isinstance(action_space, (gym.spaces.Box, gym.spaces.Discrete)):
            raise ConfigError(f"IQL needs a Box or Discrete action space, got {action_space}")
