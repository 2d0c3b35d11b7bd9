"""DDPG (Lillicrap et al. 2016) and, with its three switches on, TD3 (Fujimoto et al. 2018):
a deterministic actor mu(s), critics Q(s, a) trained on replayed transitions toward
r + gamma^n Q'(s', mu'(s')), target networks following by Polyak averaging.

The policy acts on the runners (the actor's action plus Gaussian or OU noise) and learns on
the learner: each gradient step on a replayed minibatch is one backward pass and one step of
each optimizer (``actor_critic_replay.py``); ``off_policy.py`` keeps the replay buffer and
the driver's loop.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rlmesh.algorithms.actor_critic_replay import ActorCriticReplayPolicy, OwnRates
from rlmesh.algorithms.ddpg_config import DDPGConfig
from rlmesh.algorithms.off_policy import OffPolicy
from rlmesh.config.base import ConfigError
from rlmesh.policy.torch_policy import TorchPolicy
from rlmesh.rl.action_noise import ActionNoise, action_bounds
from rlmesh.rl.actor_q import DeterministicActor, TwinQ, frozen
from rlmesh.rl.optim import Adam

__all__ = ["DDPG", "DDPGConfig", "DDPGTorchPolicy", "td_loss"]

Tensors = dict[str, torch.Tensor]


def td_loss(errors: torch.Tensor, weights: torch.Tensor | None,
            huber: float | None) -> torch.Tensor:
    """Mean (importance-weighted) 0.5 x squared TD error, or Huber with threshold ``huber``."""
    if huber is None:
        per = 0.5 * errors.pow(2)
    else:
        per = F.huber_loss(errors, torch.zeros_like(errors), reduction="none", delta=huber)
    return (per * weights).mean() if weights is not None else per.mean()


def weight_matrices(module: nn.Module) -> list[torch.Tensor]:
    """What l2_reg penalises: the weights, not the biases (as RLlib)."""
    return [p for name, p in module.named_parameters() if name.endswith("weight")]


def weight_l2(weights: list[torch.Tensor]) -> torch.Tensor:
    return sum(p.pow(2).sum() for p in weights)


def bootstrap_discount(policy: TorchPolicy, batch: Tensors) -> torch.Tensor:
    """What the next state's value is discounted by: replay's ``discounts`` (gamma^k for
    the k steps an n-step transition spans, 0 after a termination), else gamma^n_step
    where the transition did not terminate."""
    if "discounts" in batch:
        return batch["discounts"]
    cfg = policy.config
    return cfg.gamma ** cfg.n_step * (1.0 - batch["terminateds"].float())


class DDPGTorchPolicy(ActorCriticReplayPolicy):
    """The actor, the critic(s), their targets and one Adam each. ``model`` holds all four
    (checkpoints keep the targets); runners act with the actor plus exploration noise."""

    numpy_runner = "rlmesh.policy.numpy_actor:NumpyDDPGPolicy"

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, config: DDPGConfig,
                 device: str | torch.device = "cpu") -> None:
        self.low, self.high = action_bounds(action_space, config)
        super().__init__(observation_space, action_space, config, device)
        self.noise = ActionNoise(config.exploration_config, self.low, self.high)
        self.l2_weights = {k: weight_matrices(self.model[k]) for k in ("actor", "q")}
        self._low = torch.as_tensor(self.low, device=self.device)
        self._high = torch.as_tensor(self.high, device=self.device)

    def make_model(self) -> nn.Module:
        cfg = self.config
        actor = DeterministicActor(self.observation_space, self.low, self.high,
                                   cfg.actor_hiddens, cfg.actor_hidden_activation, cfg.model)
        q = TwinQ(self.observation_space, self.action_space, cfg.critic_hiddens,
                  cfg.critic_hidden_activation, cfg.twin_q, cfg.model)
        return nn.ModuleDict({"actor": actor, "q": q})  # the target: a copy of both

    def make_optimizer(self) -> Any:
        cfg = self.config
        return OwnRates(Adam(self.model["actor"].parameters(), lr=cfg.actor_lr),
                        Adam(self.model["q"].parameters(), lr=cfg.critic_lr))

    # --- runner side ---

    def seed(self, seed: int | None) -> None:
        super().seed(seed)
        self.noise.seed(seed)

    def compute_actions(self, obs_batch: np.ndarray, state_batches: Any = None,
                        prev_action_batch: Any = None, prev_reward_batch: Any = None,
                        explore: bool | None = None, timestep: int | None = None,
                        **kwargs: Any) -> tuple[np.ndarray, list, dict]:
        explore = self.config.explore if explore is None else explore
        with torch.no_grad():
            obs = torch.as_tensor(np.asarray(obs_batch), device=self.device)
            actions = self.model["actor"](obs).cpu().numpy()
        if explore:
            actions = self.noise(actions)
        shape = (len(actions), *self.action_space.shape)
        return actions.reshape(shape).astype(self.action_dtype, copy=False), [], {}

    def on_timestep(self, timestep: int) -> None:
        self.noise.timestep = max(self.noise.timestep, timestep)

    # --- learner side ---

    def updates_actor(self) -> bool:
        """TD3's delayed policy updates: the actor and the targets every policy_delay-th."""
        return self.grad_steps() % self.config.policy_delay == 0

    def target_actions(self, next_obs: torch.Tensor) -> torch.Tensor:
        """mu'(s'), with TD3's clipped Gaussian smoothing when asked."""
        cfg = self.config
        actions = self.target_model["actor"](next_obs)
        if cfg.smooth_target_policy:
            half = (self._high - self._low) / 2
            noise = (torch.randn_like(actions) * cfg.target_noise).clamp(
                -cfg.target_noise_clip, cfg.target_noise_clip)
            actions = torch.maximum(torch.minimum(actions + noise * half, self._high), self._low)
        return actions

    def loss(self, mb: Tensors) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        cfg, m = self.config, self.model
        actions = mb["actions"].reshape(len(mb["actions"]), -1)
        with torch.no_grad():
            q_next = self.target_model["q"].min(mb["next_obs"], self.target_actions(mb["next_obs"]))
            target = mb["rewards"] + bootstrap_discount(self, mb) * q_next
        qs = m["q"](mb["obs"], actions)
        huber = cfg.huber_threshold if cfg.use_huber else None
        weights = mb.get("weights")
        critic_loss = sum(td_loss(q - target, weights, huber) for q in qs)
        if cfg.l2_reg:
            critic_loss = critic_loss + cfg.l2_reg * weight_l2(self.l2_weights["q"])
        total = critic_loss
        stats = {"critic_loss": critic_loss.detach(), "mean_q": qs[0].detach().mean(),
                 "td_error": (qs[0] - target).detach()}
        if self._actor_step:
            with frozen(self.q_params):  # the actor's loss moves the actor only
                actor_loss = -m["q"](mb["obs"], m["actor"](mb["obs"]))[0].mean()  # Q1
            if cfg.l2_reg:
                actor_loss = actor_loss + cfg.l2_reg * weight_l2(self.l2_weights["actor"])
            total = total + actor_loss
            stats["actor_loss"] = actor_loss.detach()
        return total, stats


def check_box_actions(name: str, action_space: gym.Space) -> None:
    """A one-line error unless ``action_space`` is a Box (DDPG and TD3 act continuously)."""
    if not isinstance(action_space, gym.spaces.Box):
        raise ConfigError(f"{name} needs a Box (continuous) action space, got {action_space}; "
                         "for Discrete actions use SAC, DQN, PPO, APPO, IMPALA, A2C or PG")


class DDPG(OffPolicy):
    """DDPG on the rlmesh mesh: runners act with the actor plus noise, the driver keeps the
    replay buffer, the learner trains on it (``OffPolicy.training_step``)."""

    config_class = DDPGConfig
    default_policy_class = DDPGTorchPolicy

    def check_spaces(self, obs_space: gym.Space, action_space: gym.Space) -> None:
        check_box_actions(type(self).__name__, action_space)
