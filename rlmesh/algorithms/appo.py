"""APPO: PPO's clipped surrogate on IMPALA's asynchronous pipeline, with V-trace advantages.

A target network, a copy of the policy refreshed every ``target_network_update_freq``
updates, is the policy V-trace corrects toward and the anchor of the surrogate's ratio, so
the ratio stays near 1 however old the runners' weights are. Optionally a KL term to the
target network, its coefficient adapting toward ``kl_target``.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from rlmesh.algorithms.appo_config import APPOConfig
from rlmesh.algorithms.impala import (
    IMPALA, ImpalaLearnerHooks, drop_last_step, entropy_coeff, evaluate, flat_valid,
    vtrace_targets)

__all__ = ["APPO", "APPOConfig"]


def target_model(learner: Any) -> torch.nn.Module:
    """The learner's target network, made on first use as a copy of the policy."""
    target = getattr(learner, "target_model", None)
    if target is None:
        target = learner.target_model = copy.deepcopy(learner.model).requires_grad_(False)
    return target


class APPOLearnerHooks(ImpalaLearnerHooks):
    """APPO's part of a learner update: V-trace toward the target network, clipped
    surrogate, value loss, entropy, optional KL."""

    @staticmethod
    def prepare_batch(learner: Any, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        if learner.config.vtrace_drop_last_ts:
            batch = drop_last_step(batch)
        with torch.no_grad():
            _, values, bootstrap = evaluate(learner, batch, learner.model)
            old_inputs = target_model(learner)(batch["obs"].flatten(0, 1))[0]
            old_logp = learner.dist_cls.from_inputs(old_inputs).logp(
                batch["actions"].flatten(0, 1)).reshape(values.shape)
            vs, pg_advantages = vtrace_targets(learner, batch, old_logp, values, bootstrap)
        flat = flat_valid(batch, vs=vs, pg_advantages=pg_advantages, old_logp=old_logp)
        flat["old_dist_inputs"] = old_inputs[batch["mask"].flatten()]
        return flat

    @staticmethod
    def compute_loss(learner: Any, mb: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        cfg = learner.config
        dist_inputs, values = learner.model(mb["obs"])
        dist = learner.dist_cls.from_inputs(dist_inputs)
        logp = dist.logp(mb["actions"])
        # The ratio to the target network, through the behaviour policy: pi/mu * mu/target,
        # the second factor clipped to [0, 2] as in RLlib so a stale sample cannot blow it up.
        is_ratio = torch.exp(mb["action_logp"] - mb["old_logp"]).clamp(0.0, 2.0)
        ratio = is_ratio * torch.exp(logp - mb["action_logp"])
        adv = mb["pg_advantages"]
        surrogate = torch.min(adv * ratio,
                              adv * torch.clamp(ratio, 1 - cfg.clip_param, 1 + cfg.clip_param))
        policy_loss = -surrogate.mean()
        vf_loss = 0.5 * (values - mb["vs"]).pow(2).mean()
        entropy = (dist.entropy_estimate() if hasattr(dist, "entropy_estimate")
                   else dist.entropy()).mean()
        kl = learner.dist_cls.from_inputs(mb["old_dist_inputs"]).kl(dist).mean()
        coeff = entropy_coeff(learner)
        total = policy_loss + cfg.vf_loss_coeff * vf_loss - coeff * entropy
        if cfg.use_kl_loss:
            total = total + learner.state.setdefault("cur_kl_coeff", cfg.kl_coeff) * kl
        with torch.no_grad():
            var = mb["vs"].var() if len(values) > 1 else values.new_zeros(())
            explained = 1 - (mb["vs"] - values).var() / var if var > 0 else var
            clipped = ((ratio - 1).abs() > cfg.clip_param).float().mean()
        return total, {"total_loss": total.detach(), "policy_loss": policy_loss.detach(),
                       "vf_loss": vf_loss.detach(), "entropy": entropy.detach(),
                       "entropy_coeff": torch.tensor(coeff), "mean_kl_loss": kl.detach(),
                       "vf_explained_var": explained, "clip_fraction": clipped}

    @staticmethod
    def after_update(learner: Any, stats: dict[str, float]) -> None:
        cfg = learner.config
        if learner.num_updates % cfg.target_network_update_freq == 0:
            target_model(learner).load_state_dict(learner.model.state_dict())
            learner.state["num_target_updates"] = learner.state.get("num_target_updates", 0) + 1
        if cfg.use_kl_loss:
            coeff = learner.state.setdefault("cur_kl_coeff", cfg.kl_coeff)
            kl = stats.get("mean_kl_loss", 0.0)
            if kl > 2.0 * cfg.kl_target:
                coeff *= 1.5
            elif kl < 0.5 * cfg.kl_target:
                coeff *= 0.5
            learner.state["cur_kl_coeff"] = coeff


class APPO(IMPALA):
    """APPO on the rlmesh mesh: IMPALA's pipeline with APPO's learner hooks."""

    config_class = APPOConfig
    learner_hooks = APPOLearnerHooks
