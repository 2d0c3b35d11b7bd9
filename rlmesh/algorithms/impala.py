"""IMPALA (Espeholt et al. 2018): its config, what the learner computes from a batch, its loss.

Asynchronous: runners sample on with whatever weights they last fetched, so a train batch
comes from an older (behaviour) policy. The learner corrects for that lag with V-trace: value
targets ``vs`` and policy-gradient advantages weighted by clipped importance ratios. The
pipeline around it (in-flight fragments, the learner queue, replay) is ``AsyncAlgorithm``'s.
"""

from __future__ import annotations

from typing import Any

import torch

from rlmesh.algorithms.asynchronous import AsyncAlgorithm
from rlmesh.algorithms.impala_config import ImpalaConfig
from rlmesh.algorithms.schedules import value_at
from rlmesh.rl.optim import Adam, Optimizers, RMSprop
from rlmesh.rl.vtrace import vtrace

__all__ = ["IMPALA", "ImpalaConfig"]


def drop_last_step(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The batch without its last row; the dropped row's observation becomes the bootstrap
    observation (``vtrace_drop_last_ts``)."""
    t = batch["rewards"].shape[0]
    out = {k: batch[k][:t - 1] for k in ("obs", "actions", "action_logp", "action_dist_inputs",
                                          "rewards", "terminateds", "truncateds", "mask")}
    out["next_obs"] = batch["obs"][t - 1]
    keep = batch["trunc_index"][:, 0] < t - 1  # truncations on the dropped row go with it
    out["trunc_index"] = batch["trunc_index"][keep]
    out["trunc_obs"] = batch["trunc_obs"][keep]
    return out


def evaluate(learner: Any, batch: dict[str, torch.Tensor], model: torch.nn.Module
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``model``'s action log-probabilities and values ``[T, B]`` on a time-major batch,
    and the bootstrap values (after the last row, and at truncations)."""
    t, b = batch["rewards"].shape
    dist_inputs, values = model(batch["obs"].flatten(0, 1))
    logp = learner.dist_cls.from_inputs(dist_inputs).logp(batch["actions"].flatten(0, 1))
    values = values.reshape(t, b)
    bootstrap = torch.zeros_like(values)
    bootstrap[t - 1] = model(batch["next_obs"])[1]
    index = batch["trunc_index"]
    if len(index):
        bootstrap[index[:, 0], index[:, 1]] = model(batch["trunc_obs"])[1]
    return logp.reshape(t, b), values, bootstrap


def vtrace_targets(learner: Any, batch: dict[str, torch.Tensor],
                   target_logp: torch.Tensor, values: torch.Tensor, bootstrap: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """V-trace's ``(vs, pg_advantages)`` of the batch, ``target_logp`` the policy corrected to."""
    cfg = learner.config
    return vtrace(batch["action_logp"], target_logp, batch["rewards"], values, bootstrap,
                  batch["terminateds"], batch["truncateds"], cfg.gamma,
                  cfg.vtrace_clip_rho_threshold, cfg.vtrace_clip_pg_rho_threshold)


def flat_valid(batch: dict[str, torch.Tensor], **extra: torch.Tensor) -> dict[str, torch.Tensor]:
    """Time-major columns and ``extra`` ``[T, B]`` ones, flattened to the valid samples."""
    flat = {"obs": batch["obs"].flatten(0, 1), "actions": batch["actions"].flatten(0, 1),
            "action_logp": batch["action_logp"].flatten(),
            "action_dist_inputs": batch["action_dist_inputs"].flatten(0, 1),
            **{k: v.flatten() for k, v in extra.items()}}
    valid = batch["mask"].flatten()
    return {k: v[valid] for k, v in flat.items()}


def entropy_coeff(learner: Any) -> float:
    cfg = learner.config
    if cfg.entropy_coeff_schedule:
        return float(value_at(cfg.entropy_coeff_schedule, learner.timesteps))
    return cfg.entropy_coeff


def make_optimizer(learner: Any) -> Any:
    """``opt_type``'s optimizer; with ``_separate_vf_optimizer`` a second one, at ``_lr_vf``,
    for the value branch (the parameters named ``vf_*``)."""
    cfg, model = learner.config, learner.model

    def build(params: list[torch.nn.Parameter], lr: float) -> Any:
        if cfg.opt_type == "rmsprop":
            return RMSprop(params, lr=lr, alpha=cfg.decay, eps=cfg.epsilon, momentum=cfg.momentum)
        return Adam(params, lr=lr)

    if not cfg.separate_vf_optimizer:
        return build(list(model.parameters()), cfg.lr)
    vf = [p for n, p in model.named_parameters() if n.startswith("vf_")]
    pi = [p for n, p in model.named_parameters() if not n.startswith("vf_")]
    if not vf:
        raise ValueError("_separate_vf_optimizer: the model has no value parameters named "
                         "'vf_*' (a custom model must name its value branch so)")
    return Optimizers(build(pi, cfg.lr), build(vf, cfg.lr_vf))


class ImpalaLearnerHooks:
    """The IMPALA-specific part of a learner update (see rlmesh.roles.learner.LearnerHooks)."""

    make_optimizer = staticmethod(make_optimizer)

    @staticmethod
    def prepare_batch(learner: Any, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        # V-trace's outputs are constants of the loss (no gradient flows through them), so
        # they are computed once per pass with the current weights, before the minibatches.
        if learner.config.vtrace_drop_last_ts:
            batch = drop_last_step(batch)
        with torch.no_grad():
            target_logp, values, bootstrap = evaluate(learner, batch, learner.model)
            vs, pg_advantages = vtrace_targets(learner, batch, target_logp, values, bootstrap)
        return flat_valid(batch, vs=vs, pg_advantages=pg_advantages)

    @staticmethod
    def compute_loss(learner: Any, mb: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        cfg = learner.config
        dist_inputs, values = learner.model(mb["obs"])
        dist = learner.dist_cls.from_inputs(dist_inputs)
        logp = dist.logp(mb["actions"])
        policy_loss = -(logp * mb["pg_advantages"]).mean()
        vf_loss = 0.5 * (values - mb["vs"]).pow(2).mean()
        entropy = (dist.entropy_estimate() if hasattr(dist, "entropy_estimate")
                   else dist.entropy()).mean()
        coeff = entropy_coeff(learner)
        total = policy_loss + cfg.vf_loss_coeff * vf_loss - coeff * entropy
        with torch.no_grad():
            var = mb["vs"].var() if len(values) > 1 else values.new_zeros(())
            explained = 1 - (mb["vs"] - values).var() / var if var > 0 else var
        return total, {"total_loss": total.detach(), "policy_loss": policy_loss.detach(),
                       "vf_loss": vf_loss.detach(), "entropy": entropy.detach(),
                       "entropy_coeff": torch.tensor(coeff), "vf_explained_var": explained}

    @staticmethod
    def after_update(learner: Any, stats: dict[str, float]) -> None:
        pass


class IMPALA(AsyncAlgorithm):
    """IMPALA on the rlmesh mesh: runners stream fragments (through aggregators, if any) to
    the learners, which train on V-trace targets and publish weights every
    ``broadcast_interval`` updates."""

    config_class = ImpalaConfig
    learner_hooks = ImpalaLearnerHooks
