"""CQL (Kumar et al. 2020), conservative Q-learning from a dataset alone, on SAC: the critics
regress on r + gamma^n min Q'(s', a'), a' ~ pi(s'), and a conservative term pushes Q down
on actions the data did not take and up on those it did:

    min_q_weight x (temperature x logsumexp_a (Q(s, a) / temperature) - Q(s, a_data)),

the logsumexp over ``num_actions`` uniformly random actions and ``num_actions`` of the
policy's at s and at s' (each Q taken at s, less the log-density it was drawn with: CQL(H)).
With ``lagrangian`` its weight is tuned so that the gap stays near ``lagrangian_thresh``.
The actor is SAC's, cloning the data's actions for its first ``bc_iters`` gradient steps
(then, with ``bc_blend_iters``, moving from the one loss to the other over that many).
``importance_sampling=False`` leaves the log-densities out of the logsumexp.

Discrete actions: DQN's loss plus the same term, exact over the actions (``cql_discrete.py``).
The dataset is the replay (``offline_replay.py``); evaluation runners play the policy.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch
from torch import nn

from rlmesh.algorithms.actor_critic_replay import OwnRates
from rlmesh.algorithms.cql_config import CQLConfig
from rlmesh.algorithms.cql_discrete import DiscreteCQLTorchPolicy
from rlmesh.algorithms.ddpg import bootstrap_discount
from rlmesh.algorithms.offline_replay import OfflineReplay
from rlmesh.algorithms.sac import SACTorchPolicy
from rlmesh.config.base import ConfigError
from rlmesh.rl.actor_q import frozen
from rlmesh.rl.optim import Adam

__all__ = ["CQL", "CQLConfig", "CQLTorchPolicy", "DiscreteCQLTorchPolicy"]

Tensors = dict[str, torch.Tensor]
MAX_ALPHA_PRIME = 1e6  # the Lagrange multiplier's cap (the paper's code clamps it so)


class CQLTorchPolicy(SACTorchPolicy):
    """SAC's actor, twin critics and temperature, plus log(alpha') with ``lagrangian``; one
    backward pass over the sum of the losses, each reaching its own parameters only."""

    # Redeclared so that runners act in numpy although make_model is this class's.
    numpy_runner = "rlmesh.policy.numpy_actor:NumpySACPolicy"

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, config: CQLConfig,
                 device: str | torch.device = "cpu") -> None:
        if isinstance(action_space, gym.spaces.Discrete):
            raise ConfigError("CQLTorchPolicy takes Box actions; Discrete ones learn with "
                              "DiscreteCQLTorchPolicy (CQL picks it)")
        super().__init__(observation_space, action_space, config, device)
        if config.lagrangian:
            self.rate_keys = (*SACTorchPolicy.rate_keys, "cur_alpha_prime_lr")
        low, high = (torch.as_tensor(b, device=self.device) for b in (self.low, self.high))
        self._low, self._range = low, high - low
        # Uniform actions' log-density, subtracted from their Q in the logsumexp.
        self._log_uniform = -float(torch.log(self._range).sum())

    def make_model(self) -> nn.Module:
        model = super().make_model()
        if self.config.lagrangian:
            model.register_parameter("log_alpha_prime", nn.Parameter(torch.zeros(())))
        return model

    def make_optimizer(self) -> Any:
        rates = self.config.optimization_config
        optimizers = list(super().make_optimizer().optimizers)
        if self.config.lagrangian:  # the paper's code steps alpha' at the critics' rate
            optimizers.append(Adam([self.model.log_alpha_prime],
                                   lr=rates["critic_learning_rate"]))
        return OwnRates(*optimizers)

    # --- learner side ---

    def loss(self, mb: Tensors) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        cfg, m = self.config, self.model
        alpha = m.log_alpha.detach().exp()
        # a ~ pi(.|s) with gradients (the actor's loss), a' ~ pi(.|s') without (the backup):
        # two passes, as SAC's. Their distribution inputs, repeated, also give the
        # conservative term its policy actions (no actor pass over the repeated states).
        inputs = m["actor"](mb["obs"])
        actions, logp = self.dist_class.from_inputs(inputs).rsample_with_logp()
        with torch.no_grad():
            next_inputs = m["actor"](mb["next_obs"])
            next_actions, next_logp = self.dist_class.from_inputs(next_inputs).rsample_with_logp()
            next_value = self.target_model.min(mb["next_obs"], next_actions)
            if not cfg.deterministic_backup:
                next_value = next_value - alpha * next_logp
            target = mb["rewards"] + bootstrap_discount(self, mb) * next_value
        q_data, gaps = self.data_q_and_gaps(mb, torch.cat([inputs.detach(), next_inputs]))
        weights = mb.get("weights", torch.ones_like(target))
        # Squared TD errors as the paper's code (MSE: min_q_weight is relative to it).
        td = sum((weights * (q - target).pow(2)).mean() for q in q_data)
        conservative, stats = self.conservative_loss(gaps)
        critic_loss = td + conservative
        actor_loss = self.actor_loss(mb, inputs, actions, logp, alpha)
        # alpha rises while the policy's entropy is below the target, falls above it.
        alpha_loss = m.log_alpha * (-logp.detach() - self.target_entropy).mean()
        total = critic_loss + actor_loss + alpha_loss + stats.pop("alpha_prime_loss", 0.0)
        return total, {"critic_loss": critic_loss.detach(), "td_loss": td.detach(),
                       "actor_loss": actor_loss.detach(), "alpha_loss": alpha_loss.detach(),
                       "alpha_value": alpha, "entropy": -logp.detach().mean(),
                       "mean_q": q_data[0].detach().mean(), **stats,
                       "td_error": (q_data[0] - target).detach()}

    def data_q_and_gaps(self, mb: Tensors, policy_inputs: torch.Tensor
                        ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Each critic's Q(s, a_data) ``[B]`` and conservative gap (a scalar):
        temperature x mean_s logsumexp_a (Q(s, a) - log mu(a)) / temperature - mean Q(s,
        a_data), over ``num_actions`` random actions and as many of the policy's at s and
        at s' (drawn from ``policy_inputs``, the actor's distribution inputs at obs and at
        next_obs, ``[2B, .]``). One critic pass over the data's and all those actions."""
        cfg, obs, b, k = self.config, mb["obs"], len(mb["obs"]), self.config.num_actions
        with torch.no_grad():  # the term trains the critics, not the actor
            dist = self.dist_class.from_inputs(policy_inputs.repeat_interleave(k, 0))
            policy_actions, policy_logp = dist.rsample_with_logp()  # [2Bk]: at s, at s'
            random = self._low + torch.rand_like(policy_actions[:b * k]) * self._range
        obs_k = obs.repeat_interleave(k, 0)
        data_actions = mb["actions"].reshape(b, -1)
        states = torch.cat([obs, obs_k, obs_k, obs_k])
        taken = torch.cat([data_actions, random.reshape(b * k, -1),
                           policy_actions.reshape(2 * b * k, -1)])
        # On the CPU one critic at a time (TwinQ.one_by_one: what it saves is the CPU kernels');
        # elsewhere the ensemble's batched pass, as before (half the kernel launches; the
        # per-critic pass was not measured on a GPU).
        qs = (self.model["q"].one_by_one(states, taken) if obs.device.type == "cpu"
              else self.model["q"](states, taken))
        log_mu = (torch.cat([policy_logp.new_full((b * k,), self._log_uniform), policy_logp])
                  if cfg.importance_sampling else 0.0)
        t = cfg.temperature
        q_data, gaps = [], []
        for q in qs:
            scores = (q[b:] - log_mu).reshape(3, b, k).permute(1, 0, 2).reshape(b, 3 * k)
            gaps.append(t * torch.logsumexp(scores / t, 1).mean() - q[:b].mean())
            q_data.append(q[:b])
        return q_data, gaps

    def conservative_loss(self, gaps: list[torch.Tensor]
                          ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """min_q_weight x each critic's gap; with ``lagrangian``, times alpha', which its own
        loss raises while the gap is above ``lagrangian_thresh`` (dual gradient descent)."""
        cfg = self.config
        weighted = [cfg.min_q_weight * g for g in gaps]
        stats: dict[str, Any] = {"cql_gap": torch.stack(gaps).detach().mean()}
        if not cfg.lagrangian:
            loss = sum(weighted)
        else:
            alpha_prime = self.model.log_alpha_prime.exp().clamp(0.0, MAX_ALPHA_PRIME)
            loss = sum(alpha_prime.detach() * (w - cfg.lagrangian_thresh) for w in weighted)
            stats["alpha_prime_loss"] = -sum(alpha_prime * (w.detach() - cfg.lagrangian_thresh)
                                             for w in weighted) / len(weighted)
            stats["alpha_prime_value"] = alpha_prime.detach()
        stats["cql_loss"] = loss.detach()
        return loss, stats

    def actor_loss(self, mb: Tensors, inputs: torch.Tensor, actions: torch.Tensor,
                   logp: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
        """SAC's actor loss; for the first ``bc_iters`` gradient steps, behaviour cloning
        (the data's actions' log-likelihood) with the same entropy term; then, over
        ``bc_blend_iters`` steps, the one weighed into the other linearly."""
        cfg = self.config
        share = min(1.0, max(0.0, (self.grad_steps() - cfg.bc_iters) / (cfg.bc_blend_iters + 1)))
        sac = cloning = 0.0
        if share > 0:
            with frozen(self.q_params):  # the actor's loss moves the actor only
                sac = (alpha * logp - self.model["q"].min(mb["obs"], actions)).mean()
        if share < 1:
            data_logp = self.dist_class.from_inputs(inputs).logp(mb["actions"])
            cloning = (alpha * logp - data_logp).mean()
        return (1 - share) * cloning + share * sac


class CQL(OfflineReplay):
    """CQL from ``input``: the dataset's transitions replayed, SAC's (Box) or DQN's
    (Discrete) loss with the conservative term, the policy evaluated in the env."""

    config_class = CQLConfig
    default_policy_class = CQLTorchPolicy

    def get_default_policy_class(self, config: CQLConfig) -> type:
        """One algorithm name for both action spaces, as users expect: Box actions learn
        on SAC, Discrete ones on DQN (the CQL paper's discrete variant)."""
        if isinstance(self.action_space, gym.spaces.Discrete):
            return DiscreteCQLTorchPolicy
        return CQLTorchPolicy

    def check_spaces(self, obs_space: gym.Space, action_space: gym.Space) -> None:
        if not isinstance(action_space, (gym.spaces.Box, gym.spaces.Discrete)):
            raise ConfigError(f"CQL needs a Box or Discrete action space, got {action_space}")
        if isinstance(action_space, gym.spaces.Discrete) and self.config.lagrangian:
            raise ConfigError("lagrangian: discrete CQL (on DQN) weighs its conservative term "
                              "by min_q_weight only; set lagrangian=False")
