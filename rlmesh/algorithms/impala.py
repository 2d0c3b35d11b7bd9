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


def forward(batch: dict[str, torch.Tensor], model: torch.nn.Module
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``model`` on a time-major batch in one pass: distribution inputs ``[T*B, n]``,
    values ``[T, B]``, and bootstrap values ``[T, B]`` (after the last row, and at
    truncations; zero elsewhere)."""
    t, b = batch["rewards"].shape
    obs = torch.cat([batch["obs"].flatten(0, 1), batch["next_obs"], batch["trunc_obs"]])
    dist_inputs, all_values = model(obs)
    values = all_values[:t * b].reshape(t, b)
    bootstrap = torch.zeros_like(values)
    bootstrap[t - 1] = all_values[t * b:t * b + b]
    index = batch["trunc_index"]
    if len(index):
        bootstrap[index[:, 0], index[:, 1]] = all_values[t * b + b:]
    return dist_inputs[:t * b], values, bootstrap


def evaluate(learner: Any, batch: dict[str, torch.Tensor], model: torch.nn.Module
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``model``'s action log-probabilities and values ``[T, B]`` on a time-major batch,
    and the bootstrap values (see ``forward``)."""
    dist_inputs, values, bootstrap = forward(batch, model)
    logp = learner.dist_cls.from_inputs(dist_inputs).logp(batch["actions"].flatten(0, 1))
    return logp.reshape(values.shape), values, bootstrap


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


def valid_rows(mask: torch.Tensor) -> torch.Tensor | slice:
    """What picks the valid samples of a flat batch: ``mask``, or every row (a slice: no
    selection, no copy) when nothing is padding, as with fixed-length fragments. Each
    masked selection costs a search for the mask's true entries, and its backward one more."""
    return slice(None) if bool(mask.all()) else mask


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


def whole_batch(learner: Any, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
    """Without minibatches, the batch stays time-major and the loss computes V-trace from
    its own forward pass (one pass instead of two); None when minibatches are asked for."""
    if learner.config.minibatch_size is not None:
        return None
    return {**batch, "_whole_batch": True}


def loss_terms(learner: Any, dist: Any, values: torch.Tensor, vs: torch.Tensor,
               mask: torch.Tensor | slice) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """The value loss and entropy over the valid samples, and the value statistics."""
    vf_loss = 0.5 * (values[mask] - vs[mask]).pow(2).mean()
    entropy = (dist.entropy_estimate() if hasattr(dist, "entropy_estimate")
               else dist.entropy())[mask].mean()
    with torch.no_grad():
        v, target = values[mask], vs[mask]
        var = target.var() if len(v) > 1 else v.new_zeros(())
        explained = 1 - (target - v).var() / var if var > 0 else var
    return vf_loss, entropy, {"vf_loss": vf_loss.detach(), "entropy": entropy.detach(),
                              "vf_explained_var": explained}


class ImpalaLearnerHooks:
    """The IMPALA-specific part of a learner update (see rlmesh.roles.learner.LearnerHooks)."""

    make_optimizer = staticmethod(make_optimizer)

    @staticmethod
    def prepare_batch(learner: Any, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        if learner.config.vtrace_drop_last_ts:
            batch = drop_last_step(batch)
        whole = whole_batch(learner, batch)
        if whole is not None:
            return whole
        # Minibatches: V-trace's outputs are constants of the loss (no gradient flows
        # through them), computed once per pass with the current weights.
        with torch.no_grad():
            target_logp, values, bootstrap = evaluate(learner, batch, learner.model)
            vs, pg_advantages = vtrace_targets(learner, batch, target_logp, values, bootstrap)
        return flat_valid(batch, vs=vs, pg_advantages=pg_advantages)

    @staticmethod
    def compute_loss(learner: Any, mb: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        cfg = learner.config
        if "vs" in mb:  # a flat minibatch with its V-trace targets
            dist_inputs, values = learner.model(mb["obs"])
            dist = learner.dist_cls.from_inputs(dist_inputs)
            logp = dist.logp(mb["actions"])
            vs, pg_advantages = mb["vs"], mb["pg_advantages"]
            mask: torch.Tensor | slice = slice(None)
        else:  # the whole time-major batch
            dist_inputs, values, bootstrap = forward(mb, learner.model)
            dist = learner.dist_cls.from_inputs(dist_inputs)
            logp = dist.logp(mb["actions"].flatten(0, 1)).reshape(values.shape)
            with torch.no_grad():
                vs, pg_advantages = vtrace_targets(learner, mb, logp.detach(), values.detach(),
                                                   bootstrap.detach())
            mask = valid_rows(mb["mask"].bool().flatten())
            values, vs, pg_advantages = values.flatten(), vs.flatten(), pg_advantages.flatten()
            logp = logp.flatten()
        policy_loss = -(logp[mask] * pg_advantages[mask]).mean()
        vf_loss, entropy, stats = loss_terms(learner, dist, values, vs, mask)
        coeff = entropy_coeff(learner)
        total = policy_loss + cfg.vf_loss_coeff * vf_loss - coeff * entropy
        return total, {"total_loss": total.detach(), "policy_loss": policy_loss.detach(),
                       "entropy_coeff": torch.tensor(coeff), **stats}

    @staticmethod
    def after_update(learner: Any, stats: dict[str, float]) -> None:
        pass


class IMPALA(AsyncAlgorithm):
    """IMPALA on the rlmesh mesh: runners stream fragments (through aggregators, if any) to
    the learners, which train on V-trace targets and publish weights every
    ``broadcast_interval`` updates."""

    config_class = ImpalaConfig
    learner_hooks = ImpalaLearnerHooks
