"""SAC (Haarnoja et al. 2018), and for Discrete actions Christodoulou's discrete SAC (2019):
a stochastic actor maximising Q minus alpha x log-probability, twin Q networks trained toward
r + gamma^n (min Q'(s', a') - alpha log pi(a'|s')), a' ~ pi, and the temperature alpha tuned
so that the policy's entropy stays near ``target_entropy``.

Box actions: a tanh-squashed Gaussian. Discrete actions: a categorical policy, the soft
values computed exactly over all actions. One ``learn_on_batch`` is one backward pass and
one step of each of the three optimizers; the targets follow every update.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rlmesh.algorithms.actor_critic_replay import OwnRates, StochasticActorPolicy
from rlmesh.algorithms.ddpg import bootstrap_discount, td_loss
from rlmesh.algorithms.off_policy import OffPolicy
from rlmesh.algorithms.sac_config import SACConfig
from rlmesh.config.base import ConfigError
from rlmesh.policy.policy import class_path
from rlmesh.rl.action_noise import uniform_actions
from rlmesh.rl.actor_q import StochasticActor, TwinQ, frozen
from rlmesh.rl.optim import Adam

__all__ = ["SAC", "SACConfig", "SACTorchPolicy"]

Tensors = dict[str, torch.Tensor]


def auto_target_entropy(action_space: gym.Space) -> float:
    """-dim(A) for Box actions (Haarnoja et al.), 0.98 log(n) for Discrete(n) (RLlib's
    discrete SAC: near the uniform policy's entropy)."""
    if isinstance(action_space, gym.spaces.Discrete):
        return 0.98 * math.log(int(action_space.n))
    return -float(np.prod(action_space.shape))


class SACTorchPolicy(StochasticActorPolicy):
    """The actor, the twin Q networks and their targets, and log(alpha), all in ``model``
    (checkpoints keep them), with one Adam each."""

    numpy_runner = "rlmesh.policy.numpy_actor:NumpySACPolicy"
    # RLlib's new stack reports these as policy_, qf_ and alpha_learning_rate.
    rate_keys = ("cur_actor_lr", "cur_critic_lr", "cur_alpha_lr")

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, config: SACConfig,
                 device: str | torch.device = "cpu") -> None:
        super().__init__(observation_space, action_space, config, device)
        target = config.target_entropy
        self.target_entropy = (auto_target_entropy(action_space) if target == "auto"
                               else float(target))
        self.rng = np.random.default_rng()
        self.timestep = 0  # steps acted with exploration on this copy (random_timesteps)

    #: A user's RLModule is the actor and the critics (``policy/sac_module_model.py``).
    takes_rl_modules = True

    @staticmethod
    def module_model_config(config: Any) -> dict[str, Any]:
        from rlmesh.policy.sac_module_model import sac_model_config

        return sac_model_config(config)

    @classmethod
    def runner_class(cls, config: SACConfig, observation_space: gym.Space | None = None,
                     action_space: gym.Space | None = None) -> str:
        """The numpy runner for SAC's own actor on a flat observation; a user's RLModule
        acts in torch (this class)."""
        if getattr(config, "module_spec", None) is not None:
            return class_path(cls)
        return super().runner_class(config, observation_space, action_space)

    def make_model(self) -> nn.Module:
        """SAC's own networks, or the config's RLModule giving them (its actor's
        distribution inputs and compute_q_values' ``qf_preds`` / ``qf_twin_preds``)."""
        cfg = self.config
        data = self.module_data(cfg)
        if data is not None:
            if type(self).make_model is not SACTorchPolicy.make_model:
                raise ConfigError(
                    f"rl_module_spec: {type(self).__name__} builds networks beyond SAC's "
                    f"(make_model) and takes no RLModule; SAC does (its RLModule gives the "
                    f"actor and the critics), and DQN, PPO, APPO, IMPALA, PG, A2C, A3C")
            from rlmesh.policy.sac_module_model import build_sac_module_model

            return build_sac_module_model(data, self.observation_space, self.action_space, cfg)
        pm, qm = cfg.policy_model_config, cfg.q_model_config
        outputs = int(self.action_space.n) if self.discrete else 2 * len(self.low)
        actor = StochasticActor(self.observation_space, outputs, pm["fcnet_hiddens"],
                                pm["fcnet_activation"], cfg.model)
        q = TwinQ(self.observation_space, self.action_space, qm["fcnet_hiddens"],
                  qm["fcnet_activation"], cfg.twin_q, cfg.model)
        model = nn.ModuleDict({"actor": actor, "q": q})
        model.register_parameter("log_alpha",
                                 nn.Parameter(torch.tensor(math.log(cfg.initial_alpha))))
        return model

    def make_optimizer(self) -> Any:
        rates = self.config.optimization_config
        return OwnRates(Adam(self.model["actor"].parameters(), lr=rates["actor_learning_rate"]),
                        Adam(self.model["q"].parameters(), lr=rates["critic_learning_rate"]),
                        Adam([self.model.log_alpha], lr=rates["entropy_learning_rate"]))

    def target_modules(self) -> nn.Module:
        return self.model["q"]  # the actor has no target in SAC

    # --- runner side ---

    def seed(self, seed: int | None) -> None:
        super().seed(seed)
        self.rng = np.random.default_rng(seed)

    def compute_actions(self, obs_batch: np.ndarray, state_batches: Any = None,
                        prev_action_batch: Any = None, prev_reward_batch: Any = None,
                        explore: bool | None = None, timestep: int | None = None,
                        **kwargs: Any) -> tuple[np.ndarray, list, dict]:
        explore = self.config.explore if explore is None else explore
        n = len(obs_batch)
        if explore:
            self.timestep += n
            if self.timestep - n < self.config.exploration_config.get("random_timesteps", 0):
                return self._random_actions(n), [], {}
        with torch.no_grad():
            inputs = self.model["actor"](torch.as_tensor(np.asarray(obs_batch), device=self.device))
            dist = self.dist_class.from_inputs(inputs)
            actions = dist.sample() if explore else dist.deterministic_sample()
        return actions.cpu().numpy().astype(self.action_dtype, copy=False), [], {}

    def _random_actions(self, n: int) -> np.ndarray:
        if self.discrete:
            return self.rng.integers(0, int(self.action_space.n), size=n).astype(self.action_dtype)
        actions = uniform_actions(self.rng, self.low, self.high, n)
        return actions.reshape(n, *self.action_space.shape).astype(self.action_dtype)

    def on_timestep(self, timestep: int) -> None:
        self.timestep = max(self.timestep, timestep)

    # --- learner side ---

    def loss(self, mb: Tensors) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        log_alpha = self.model.log_alpha
        alpha = log_alpha.detach().exp()
        if self.discrete:
            critic_loss, actor_loss, entropy, td_error = self._discrete_losses(mb, alpha)
        else:
            critic_loss, actor_loss, entropy, td_error = self._continuous_losses(mb, alpha)
        # alpha rises while the policy's entropy is below the target, falls above it.
        alpha_loss = log_alpha * (entropy.detach() - self.target_entropy).mean()
        total = critic_loss + actor_loss + alpha_loss
        return total, {"critic_loss": critic_loss.detach(), "actor_loss": actor_loss.detach(),
                       "alpha_loss": alpha_loss.detach(), "alpha_value": alpha,
                       "entropy": entropy.detach().mean(),
                       "target_entropy": float(self.target_entropy), "td_error": td_error}

    def _soft_target(self, mb: Tensors, next_value: torch.Tensor) -> torch.Tensor:
        return mb["rewards"] + bootstrap_discount(self, mb) * next_value

    def _actor_outputs(self, mb: Tensors) -> tuple[torch.Tensor, torch.Tensor]:
        """The actor on ``obs`` and (detached) on ``next_obs``, in one forward pass: the
        launches of a small network cost more than its arithmetic."""
        n = len(mb["obs"])
        inputs = self.model["actor"](torch.cat([mb["obs"], mb["next_obs"]]))
        return inputs[:n], inputs[n:].detach()

    def _continuous_losses(self, mb: Tensors, alpha: torch.Tensor) -> tuple[torch.Tensor, ...]:
        m, weights = self.model, mb.get("weights")
        # a ~ pi(.|s) with gradients, a' ~ pi(.|s') without: two passes, as one pass over
        # cat(obs, next_obs) backpropagates through both halves (a third more of the
        # actor's arithmetic: 10.3 -> 9.6 ms per step at [256, 256] on one thread).
        actions, logp = self.dist_class.from_inputs(m["actor"](mb["obs"])).rsample_with_logp()
        with torch.no_grad():
            next_inputs = m["actor"](mb["next_obs"])
            next_actions, next_logp = self.dist_class.from_inputs(next_inputs).rsample_with_logp()
            next_value = self.target_model.min(mb["next_obs"], next_actions) - alpha * next_logp
            target = self._soft_target(mb, next_value)
        qs = m["q"](mb["obs"], mb["actions"])
        critic_loss = sum(td_loss(q - target, weights, None) for q in qs)
        with frozen(self.q_params):  # the actor's loss moves the actor only
            q_pi = m["q"].min(mb["obs"], actions)
        actor_loss = (alpha * logp - q_pi).mean()
        return critic_loss, actor_loss, -logp, (qs[0] - target).detach()

    def _discrete_losses(self, mb: Tensors, alpha: torch.Tensor) -> tuple[torch.Tensor, ...]:
        m, weights = self.model, mb.get("weights")
        logits, next_logits = self._actor_outputs(mb)
        with torch.no_grad():
            next_logp = F.log_softmax(next_logits, -1)
            next_q = self.target_model.min(mb["next_obs"])
            next_value = (next_logp.exp() * (next_q - alpha * next_logp)).sum(-1)
            target = self._soft_target(mb, next_value)
        q_all = m["q"](mb["obs"])
        index = mb["actions"].long().reshape(-1, 1)
        qs = [q.gather(1, index).squeeze(1) for q in q_all]
        critic_loss = sum(td_loss(q - target, weights, None) for q in qs)
        logp = F.log_softmax(logits, -1)
        probs = logp.exp()
        q_min = (q_all[0] if len(q_all) == 1 else torch.minimum(*q_all)).detach()
        actor_loss = (probs * (alpha * logp - q_min)).sum(-1).mean()
        entropy = -(probs * logp).sum(-1)
        return critic_loss, actor_loss, entropy, (qs[0] - target).detach()


class SAC(OffPolicy):
    """SAC on the rlmesh mesh: runners sample from the policy, the driver keeps the replay
    buffer, the learner trains on it (``OffPolicy.training_step``)."""

    config_class = SACConfig
    default_policy_class = SACTorchPolicy

    def check_spaces(self, obs_space: gym.Space, action_space: gym.Space) -> None:
        if not isinstance(action_space, (gym.spaces.Box, gym.spaces.Discrete)):
            raise ConfigError(f"SAC needs a Box or Discrete action space, got {action_space}; "
                             "for other action spaces use PPO, APPO, IMPALA, A2C or PG")
