"""DQN (Mnih et al. 2015) with double Q, dueling heads, n-step returns, prioritized replay,
noisy nets and distributional Q (C51): Rainbow's parts.

Runners act epsilon-greedily on the Q network (in numpy, ``policy/numpy_q.py``) and ship
fragments; the driver stores their n-step transitions and, at ``training_intensity``,
has the learner regress Q(s, a) on ``r + discounts * Q_target(s', argmax_a' Q(s', a'))``
with the Huber loss, weighted by prioritized replay's importance weights (the plumbing:
``off_policy.py``). With ``num_atoms`` > 1 (C51) the network gives a distribution of returns
per action and the loss is the cross-entropy to the target distribution projected onto the
support (``rl/distributional.py``).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rlmesh.algorithms.dqn_config import DQNConfig
from rlmesh.algorithms.off_policy import OffPolicy, OffPolicyTorchPolicy
from rlmesh.config.base import ConfigError
from rlmesh.policy.numpy_q import STEP_INDEX, epsilon_at, softq_actions
from rlmesh.policy.policy import class_path
from rlmesh.rl import distributional
from rlmesh.rl.q_network import QModel
from rlmesh.rl.spec import numpy_fast_path

__all__ = ["DQN", "DQNConfig", "DQNTorchPolicy", "QModel"]

NUMPY_RUNNER = "rlmesh.policy.numpy_q:NumpyQPolicy"


class DQNTorchPolicy(OffPolicyTorchPolicy):
    """DQN's learner side: the Q network, its target copy, the TD loss."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, config: DQNConfig,
                 device: str | torch.device = "cpu") -> None:
        check_discrete(action_space)
        super().__init__(observation_space, action_space, config, device)
        self.view_requirements = dict(STEP_INDEX)
        self._rng = np.random.default_rng(config.seed)
        self.support = (distributional.support(config.num_atoms, config.v_min, config.v_max,
                                               device=self.device)
                        if config.num_atoms > 1 else None)

    #: A user's RLModule is the Q network (``policy/q_module_model.py``).
    takes_rl_modules = True

    @staticmethod
    def module_model_config(config: Any) -> dict[str, Any]:
        from rlmesh.policy.q_module_model import dqn_model_config

        return dqn_model_config(config)

    def make_model(self) -> nn.Module:
        """DQN's ``QModel``, or the config's RLModule giving Q-values (``qf_preds``)."""
        cfg = self.config
        data = self.module_data(cfg)
        if data is not None:
            from rlmesh.policy.q_module_model import build_q_module_model

            return build_q_module_model(data, self.observation_space, self.action_space, cfg)
        return QModel(self.observation_space, int(self.action_space.n), cfg.model, cfg.hiddens,
                      cfg.dueling, cfg.noisy, cfg.sigma0, cfg.num_atoms, cfg.v_min, cfg.v_max)

    @classmethod
    def runner_class(cls, config: DQNConfig, observation_space: gym.Space | None = None,
                     action_space: gym.Space | None = None) -> str:
        """Numpy acting for the default Q network on a flat observation; else this class
        (a user's RLModule acts in torch)."""
        default = (cls.compute_actions is DQNTorchPolicy.compute_actions
                   and cls.make_model is DQNTorchPolicy.make_model
                   and getattr(config, "module_spec", None) is None)
        flat = (observation_space is not None
                and numpy_fast_path(observation_space, action_space, config.model))
        return NUMPY_RUNNER if default and flat else class_path(cls)

    def compute_actions(self, obs_batch: np.ndarray, state_batches: Any = None,
                        prev_action_batch: Any = None, prev_reward_batch: Any = None,
                        explore: bool | None = None, timestep: int | None = None,
                        **kwargs: Any) -> tuple[np.ndarray, list[np.ndarray], dict[str, np.ndarray]]:
        explore = self.config.explore if explore is None else explore
        training = self.model.training
        self.model.train(explore)  # noisy layers: fresh noise exploring, mean weights greedy
        with torch.no_grad():
            q = self.model(torch.as_tensor(np.asarray(obs_batch), device=self.device))[0]
        self.model.train(training)
        actions = q.argmax(-1).cpu().numpy().astype(np.int64)
        exploration = self.config.exploration_config
        if explore and exploration.get("type") == "SoftQ":
            actions = softq_actions(q.cpu().numpy(), exploration.get("temperature", 1.0),
                                    self._rng).astype(np.int64)
            self.global_timestep += len(actions)
        elif explore and self.config.noisy:  # the noise explores: no epsilon (as RLlib)
            self.global_timestep += len(actions)
        elif explore:
            eps = epsilon_at(self.config.exploration_config,
                             self.global_timestep if timestep is None else timestep,
                             self.worker_index, self.config.num_env_runners)
            rand = self._rng.random(len(actions)) < eps
            actions[rand] = self._rng.integers(0, q.shape[-1], int(rand.sum()))
            self.global_timestep += len(actions)
        return actions, [], {}

    def heads(self, model: nn.Module, obs: torch.Tensor) -> torch.Tensor:
        """What the loss reads from a network: Q-values ``[N, A]``, or with num_atoms > 1
        the return distributions' logits ``[N, A, num_atoms]``."""
        return q_values(model, obs) if self.support is None else q_logits(model, obs)

    def target_outputs(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        next_obs = batch["next_obs"]
        out = self.heads(self.target_model, next_obs.flatten(0, 1))
        return {"target_q_next": out.reshape(*next_obs.shape[:2], *out.shape[1:])}

    def online_q(self, mb: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Q(obs) (or C51's logits) with autograd and, double Q, the online network's output
        on next_obs that picks the target's action, without it."""
        if not self.config.double_q:
            return self.heads(self.model, mb["obs"]), None
        if self.config.noisy:  # one pass: one noise draw for obs and next_obs
            n = len(mb["obs"])
            q_all = self.heads(self.model, torch.cat([mb["obs"], mb["next_obs"]]))
            return q_all[:n], q_all[n:].detach()
        # Two passes, the second without autograd: in one pass on cat(obs, next_obs) the
        # backward ran through the next_obs rows too (the same values, 0.1 of a step more).
        q = self.heads(self.model, mb["obs"])
        with torch.no_grad():
            return q, self.heads(self.model, mb["next_obs"])

    def loss(self, mb: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        cfg = self.config
        q, q_next_online = self.online_q(mb)
        with torch.no_grad():
            q_next = mb.get("target_q_next")
            if q_next is None:
                q_next = self.heads(self.target_model, mb["next_obs"])
        if self.support is not None:
            return self.distributional_loss(mb, q, q_next_online, q_next)
        with torch.no_grad():
            chooser = q_next_online if cfg.double_q else q_next
            best = q_next.gather(1, chooser.argmax(-1, keepdim=True)).squeeze(1)
            target = mb["rewards"] + mb["discounts"] * best
        q_taken = q.gather(1, mb["actions"].long().unsqueeze(1)).squeeze(1)
        if cfg.td_error_loss_fn == "huber":
            per_sample = F.huber_loss(q_taken, target, reduction="none", delta=1.0)
        else:
            per_sample = 0.5 * (q_taken - target).pow(2)
        loss = (mb["weights"] * per_sample).mean()
        td = (q_taken - target).detach()
        return loss, {"total_loss": loss.detach(), "mean_q": q_taken.detach().mean(),
                      "mean_td_error": td.abs().mean(), "td_error": td}

    def distributional_loss(self, mb: dict[str, torch.Tensor], logits: torch.Tensor,
                            logits_next_online: torch.Tensor | None, logits_next: torch.Tensor
                            ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """C51: the cross-entropy of Z(obs, action) to the target network's distribution
        at next_obs (of the action the online network picks, double Q) shifted by the
        n-step reward, scaled by gamma**n and projected onto the support; the per-sample
        cross-entropy is the TD error (the priorities), as RLlib's."""
        z = self.support
        with torch.no_grad():
            probs_next = logits_next.softmax(-1)
            chooser = (distributional.expected_q(logits_next_online, z) if self.config.double_q
                       else (probs_next * z).sum(-1))
            best = taken_rows(probs_next, chooser.argmax(-1))
            target = distributional.project(best, mb["rewards"], mb["discounts"], z)
        taken = taken_rows(logits, mb["actions"].long())
        per_sample = distributional.cross_entropy(taken, target)
        loss = (mb["weights"] * per_sample).mean()
        ce = per_sample.detach()
        return loss, {"total_loss": loss.detach(),
                      "mean_q": distributional.expected_q(taken.detach(), z).mean(),
                      "mean_td_error": ce.mean(), "td_error": ce}


def q_values(model: nn.Module, obs: torch.Tensor) -> torch.Tensor:
    """Q-values ``[N, num_actions]``: ``QModel.q_values``, or a custom model's first output."""
    fn = getattr(model, "q_values", None)
    return fn(obs) if fn is not None else model(obs)[0]


def q_logits(model: nn.Module, obs: torch.Tensor) -> torch.Tensor:
    """C51's logits ``[N, A, num_atoms]`` (``QModel.q_logits``)."""
    fn = getattr(model, "q_logits", None)
    if fn is None:
        raise ConfigError(f"num_atoms > 1: distributional DQN needs DQN's own Q network "
                          f"(QModel.q_logits); {type(model).__name__} has no q_logits")
    return fn(obs)


def taken_rows(x: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """``x[i, actions[i]]`` of ``x`` ``[B, A, K]``: ``[B, K]``."""
    return x.gather(1, actions.view(-1, 1, 1).expand(-1, 1, x.shape[-1])).squeeze(1)


def check_discrete(action_space: gym.Space) -> None:
    if not isinstance(action_space, gym.spaces.Discrete):
        raise ConfigError(f"DQN needs a Discrete action space, got {action_space}; for Box "
                         "actions use SAC, TD3 or DDPG")


class DQN(OffPolicy):
    """DQN on the rlmesh mesh: runners sample epsilon-greedily, the driver keeps the replay
    buffer, the learner trains on it (``OffPolicy.training_step``)."""

    config_class = DQNConfig
    default_policy_class = DQNTorchPolicy

    def check_spaces(self, obs_space: Any, action_space: Any) -> None:
        check_discrete(action_space)
