"""PPO (Schulman et al. 2017): its config, what the learner computes from a batch, its loss.

Synchronous: each iteration samples ``train_batch_size`` env steps with the current
policy (policy lag 0), computes values and GAE on the learner's device, then runs
``num_epochs`` passes of minibatch SGD on the clipped surrogate.
"""

from __future__ import annotations

from typing import Any

import torch

from rlmesh.algorithms.algorithm import Algorithm
from rlmesh.algorithms.ppo_config import PPOConfig
from rlmesh.rl.gae import compute_gae

__all__ = ["PPO", "PPOConfig"]


class PPOLearnerHooks:
    """The PPO-specific part of a learner update (see rlmesh.roles.learner.LearnerHooks)."""

    @staticmethod
    def prepare_batch(learner: Any, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        cfg = learner.config
        model = learner.model
        t, b = batch["rewards"].shape
        with torch.no_grad():
            values = model(batch["obs"].flatten(0, 1))[1].reshape(t, b)
            # V(s_{t+1}) where the fragment cannot supply it: after its last row, and at
            # truncations (the env's final observation, not the reset one).
            bootstrap = torch.zeros_like(values)
            bootstrap[t - 1] = model(batch["next_obs"])[1]
            index = batch["trunc_index"]
            if len(index):
                bootstrap[index[:, 0], index[:, 1]] = model(batch["trunc_obs"])[1]
            lambda_ = cfg.lambda_ if cfg.use_gae else 1.0
            advantages, targets = compute_gae(
                batch["rewards"], values, bootstrap, batch["terminateds"], batch["truncateds"],
                cfg.gamma, lambda_)
        valid = batch["mask"].flatten()
        flat = {
            "obs": batch["obs"].flatten(0, 1), "actions": batch["actions"].flatten(0, 1),
            "action_logp": batch["action_logp"].flatten(), "values": values.flatten(),
            "action_dist_inputs": batch["action_dist_inputs"].flatten(0, 1),
            "advantages": advantages.flatten(), "value_targets": targets.flatten(),
        }
        flat = {k: v[valid] for k, v in flat.items()}
        adv = flat["advantages"]
        flat["advantages"] = (adv - adv.mean()) / (adv.std() + 1e-8) if len(adv) > 1 else adv
        return flat

    @staticmethod
    def compute_loss(learner: Any, mb: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        cfg = learner.config
        dist_inputs, values = learner.model(mb["obs"])
        dist = learner.dist_cls.from_inputs(dist_inputs)
        old = learner.dist_cls.from_inputs(mb["action_dist_inputs"])
        logp = dist.logp(mb["actions"])
        ratio = torch.exp(logp - mb["action_logp"])
        adv = mb["advantages"]
        surrogate = torch.min(adv * ratio,
                              adv * torch.clamp(ratio, 1 - cfg.clip_param, 1 + cfg.clip_param))
        policy_loss = -surrogate.mean()
        if cfg.use_critic:
            vf_error = (values - mb["value_targets"]).pow(2)
            vf_loss = torch.clamp(vf_error, 0, cfg.vf_clip_param).mean()
        else:
            vf_error = vf_loss = torch.zeros((), device=values.device)
        # A squashed Gaussian has no closed-form entropy: a one-sample estimate instead.
        entropy = (dist.entropy_estimate() if hasattr(dist, "entropy_estimate")
                   else dist.entropy()).mean()
        kl = old.kl(dist).mean()
        total = policy_loss + cfg.vf_loss_coeff * vf_loss - cfg.entropy_coeff * entropy
        if cfg.use_kl_loss:
            total = total + learner.state.setdefault("cur_kl_coeff", cfg.kl_coeff) * kl
        with torch.no_grad():
            # A one-sample minibatch (a policy server's first steps) has no variance.
            var = mb["value_targets"].var() if len(values) > 1 else values.new_zeros(())
            explained = 1 - (mb["value_targets"] - values).var() / var if var > 0 else var
            clipped = ((ratio - 1).abs() > cfg.clip_param).float().mean()
        return total, {"total_loss": total.detach(), "policy_loss": policy_loss.detach(),
                       "vf_loss": vf_loss.detach(), "vf_loss_unclipped": vf_error.mean().detach(),
                       "entropy": entropy.detach(), "mean_kl_loss": kl.detach(),
                       "vf_explained_var": explained, "clip_fraction": clipped}

    @staticmethod
    def after_update(learner: Any, stats: dict[str, float]) -> None:
        if learner.config.use_kl_loss:
            adapt_kl_coeff(learner, stats.get("mean_kl_loss", 0.0))


def adapt_kl_coeff(learner: Any, kl: float) -> None:
    """The adaptive KL penalty of the PPO paper, with RLlib's factors: the coefficient
    x1.5 when the KL of the update exceeds twice ``kl_target``, x0.5 below half of it."""
    cfg = learner.config
    coeff = learner.state.setdefault("cur_kl_coeff", cfg.kl_coeff)
    if kl > 2.0 * cfg.kl_target:
        coeff *= 1.5
    elif kl < 0.5 * cfg.kl_target:
        coeff *= 0.5
    learner.state["cur_kl_coeff"] = coeff


class PPO(Algorithm):
    """PPO on the rlmesh mesh: env runners sample, one learner updates, the param server
    hands the new weights to the runners."""

    config_class = PPOConfig
    learner_hooks = PPOLearnerHooks
