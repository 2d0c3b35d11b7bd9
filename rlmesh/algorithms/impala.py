"""IMPALA (Espeholt et al. 2018): its config, what the learner computes from a batch, its loss.

Asynchronous: runners sample on with whatever weights they last fetched, so a train batch
comes from an older (behaviour) policy. The learner corrects for that lag with V-trace: value
targets ``vs`` and policy-gradient advantages weighted by clipped importance ratios. With
``vtrace=False`` it ignores the lag, as RLlib's IMPALA then does with A3C's loss: the targets
are the discounted returns over each fragment, bootstrapped from the learner's critic. The
pipeline around it (in-flight fragments, the learner queue, replay) is ``AsyncAlgorithm``'s.

The learner actor's update thread to the loss: LearnerActor._run -> _update ->
Learner.update_from_batch -> TorchPolicy.update (``prepare_batch`` below: V-trace's inputs,
then minibatches; the learner actor's loop calls it with ``num_epochs=1``, its input replays
batches itself) -> ``loss`` below.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch

from rlmesh.driver.asynchronous import AsyncAlgorithm
from rlmesh.algorithms.impala_config import ImpalaConfig
from rlmesh.policy.recurrent import (is_recurrent, sequence_index, sequence_samples,
                                     time_major_outputs)
from rlmesh.policy.learner_stats import entropy_of, explained_variance
from rlmesh.policy.torch_policy import TorchPolicy
from rlmesh.rl.columns import time_major_keys
from rlmesh.rl.gae import compute_gae
from rlmesh.rl.optim import Optimizers, from_config
from rlmesh.rl.vtrace import vtrace

__all__ = ["IMPALA", "ImpalaConfig", "ImpalaTorchPolicy"]


def drop_last_step(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The batch without its last row; the dropped row's observation becomes the bootstrap
    observation (``vtrace_drop_last_ts``)."""
    t = batch["rewards"].shape[0]
    out = {k: batch[k][:t - 1] for k in time_major_keys(batch)}
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


def evaluate(policy: Any, batch: dict[str, torch.Tensor], model: torch.nn.Module
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``model``'s action log-probabilities and values ``[T, B]`` on a time-major batch,
    and the bootstrap values (see ``forward``)."""
    if is_recurrent(model):  # over the batch's sequences, each from its recorded state
        dist_inputs, values, bootstrap = time_major_outputs(model, batch)
    else:
        dist_inputs, values, bootstrap = forward(batch, model)
    logp = policy.dist_class.from_inputs(dist_inputs).logp(batch["actions"].flatten(0, 1))
    return logp.reshape(values.shape), values, bootstrap


def targets(policy: Any, batch: dict[str, torch.Tensor], target_logp: torch.Tensor,
            values: torch.Tensor, bootstrap: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss's ``(value_targets, pg_advantages)`` of the batch: V-trace's ``(vs,
    pg_advantages)``, ``target_logp`` the policy corrected to; with ``vtrace=False`` the
    policy's ``on_policy_targets``, the batch taken as sampled by the policy trained."""
    cfg = policy.config
    if not cfg.vtrace:
        return policy.on_policy_targets(batch, values, bootstrap)
    return vtrace(batch["action_logp"], target_logp, batch["rewards"], values, bootstrap,
                  batch["terminateds"], batch["truncateds"], cfg.gamma,
                  cfg.vtrace_clip_rho_threshold, cfg.vtrace_clip_pg_rho_threshold,
                  lambda_=cfg.vtrace_lambda, pg_rho=policy.pg_rho)


def gae_targets(batch: dict[str, torch.Tensor], values: torch.Tensor, bootstrap: torch.Tensor,
                gamma: float, lambda_: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(value_targets, advantages)`` by GAE over each fragment from the learner's values,
    episode ends inside it as ``compute_gae`` treats them (a truncation bootstraps, a
    termination does not); ``lambda_=1``: the returns bootstrapped where the data stops."""
    advantages, value_targets = compute_gae(batch["rewards"], values, bootstrap,
                                            batch["terminateds"], batch["truncateds"],
                                            gamma, lambda_)
    return value_targets, advantages


def flat_valid(batch: dict[str, torch.Tensor], **extra: torch.Tensor) -> dict[str, torch.Tensor]:
    """Time-major columns and ``extra`` ``[T, B]`` ones, flattened to the valid samples."""
    flat = {"obs": batch["obs"].flatten(0, 1), "actions": batch["actions"].flatten(0, 1),
            "action_logp": batch["action_logp"].flatten(),
            "action_dist_inputs": batch["action_dist_inputs"].flatten(0, 1),
            **{k: v.flatten(0, 1) for k, v in extra.items()}}
    valid = batch["mask"].flatten()
    return {k: v[valid] for k, v in flat.items()}


def train_samples(policy: Any, batch: dict[str, torch.Tensor], **extra: torch.Tensor
                  ) -> dict[str, torch.Tensor]:
    """``flat_valid``'s samples, or for a recurrent model whole padded sequences."""
    if policy.recurrent:
        index = sequence_index(batch, policy.model.max_seq_len)
        return sequence_samples(batch, index, **extra)
    return flat_valid(batch, **extra)


def valid_rows(mask: torch.Tensor) -> torch.Tensor | slice:
    """What picks the valid samples of a flat batch: ``mask``, or every row (a slice: no
    selection, no copy) when nothing is padding, as with fixed-length fragments. Each
    masked selection costs a search for the mask's true entries, and its backward one more."""
    return slice(None) if bool(mask.all()) else mask


def make_optimizer(policy: Any) -> Any:
    """``opt_type``'s optimizer; with ``_separate_vf_optimizer`` a second one, at ``_lr_vf``,
    for the value branch (the parameters named ``vf_*``)."""
    cfg, model = policy.config, policy.model

    if not cfg.separate_vf_optimizer:
        return from_config(cfg, model.parameters(), cfg.lr)
    vf = [p for n, p in model.named_parameters() if n.startswith("vf_")]
    pi = [p for n, p in model.named_parameters() if not n.startswith("vf_")]
    if not vf:
        raise ValueError("_separate_vf_optimizer: the model has no value parameters named "
                         "'vf_*' (a custom model must name its value branch so)")
    return Optimizers(from_config(cfg, pi, cfg.lr), from_config(cfg, vf, cfg.lr_vf))


def whole_batch(policy: Any, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
    """Without minibatches, the batch stays time-major and the loss computes its targets
    from its own forward pass (one pass instead of two); None when minibatches are asked for."""
    if policy.config.minibatch_size is not None or policy.recurrent:
        return None
    return {**batch, "_whole_batch": True}


def loss_terms(policy: Any, dist: Any, values: torch.Tensor, vs: torch.Tensor,
               mask: torch.Tensor | slice, behaviour_inputs: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """The value loss and entropy over the valid samples, and the value statistics. The KL
    from the behaviour policy to the one trained is reported, not optimised: it shows how far
    the policy lag has carried the two apart (V-trace's clipping hides large gaps)."""
    vf_loss = 0.5 * (values[mask] - vs[mask]).pow(2).mean()
    entropy = entropy_of(dist)[mask].mean()
    with torch.no_grad():
        kl = policy.dist_class.from_inputs(behaviour_inputs).kl(dist)[mask].mean()
    return vf_loss, entropy, {"vf_loss": vf_loss.detach(), "entropy": entropy.detach(),
                              "behaviour_kl": kl,
                              "vf_explained_var": explained_variance(vs[mask], values[mask])}


def centered(policy: Any, advantages: torch.Tensor, rhos: torch.Tensor | None = None
             ) -> torch.Tensor:
    """The (valid) policy-gradient advantages, less a constant baseline where
    ``center_advantages`` says so ('auto': Box actions).

    ``rhos``: the importance weights already in ``advantages`` (V-trace's ``rho_pg * (q -
    V)``). The baseline then goes inside them, ``rho_pg * (q - V - b)`` with ``b`` their
    self-normalised mean ``sum(rho_pg (q - V)) / sum(rho_pg)``: subtracting a plain mean
    outside would give a stale sample (``rho`` near 0) the weight ``-b`` with no importance
    weight, and the gradient of a narrow Gaussian's log-density there grows as ``1/sigma^2``.
    On-policy (every ``rho`` 1) both are the plain mean."""
    setting = policy.config.center_advantages
    if setting == "auto":
        setting = isinstance(policy.action_space, gym.spaces.Box)
    if not setting or advantages.numel() <= 1:
        return advantages
    if rhos is None:
        return advantages - advantages.mean()
    return advantages - rhos * (advantages.sum() / rhos.sum().clamp(min=1e-8))


def pg_rhos(policy: Any, behaviour_logp: torch.Tensor, target_logp: torch.Tensor
            ) -> torch.Tensor | None:
    """V-trace's clipped importance weights of the policy-gradient advantages (the ones
    ``vtrace`` puts in them); None without V-trace."""
    cfg = policy.config
    if not cfg.vtrace:
        return None
    ratios = torch.exp(target_logp.to(behaviour_logp.dtype) - behaviour_logp)
    threshold = cfg.vtrace_clip_pg_rho_threshold
    return ratios if threshold is None else ratios.clamp(max=threshold)


class ImpalaTorchPolicy(TorchPolicy):
    """IMPALA's learner side: V-trace targets toward the current policy (or A3C's returns),
    the policy-gradient loss weighted by their advantages, the value loss and the entropy
    bonus."""

    #: Whether V-trace's policy-gradient advantages carry the clipped rho_pg (IMPALA's
    #: loss has no other importance weight: always).
    pg_rho = True

    def make_optimizer(self) -> Any:
        return make_optimizer(self)

    def on_policy_targets(self, batch: dict[str, torch.Tensor], values: torch.Tensor,
                          bootstrap: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``vtrace=False``: A3C's targets, the discounted returns bootstrapped from the
        critic (GAE with lambda 1; RLlib's IMPALA has no lambda), and the advantages
        ``returns - V``. They equal V-trace's when the batch is on-policy."""
        return gae_targets(batch, values, bootstrap, self.config.gamma, 1.0)

    def prepare_batch(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The batch whole and time-major (no minibatches: the loss computes V-trace), or
        flat samples (sequences) with V-trace's ``vs`` and ``pg_advantages`` computed once
        with the current weights."""
        if self.config.vtrace and self.config.vtrace_drop_last_ts:
            batch = drop_last_step(batch)
        whole = whole_batch(self, batch)
        if whole is not None:
            return whole
        # Minibatches: the targets are constants of the loss (no gradient flows through
        # them), computed once per pass with the current weights.
        with torch.no_grad():
            target_logp, values, bootstrap = evaluate(self, batch, self.model)
            vs, pg_advantages = targets(self, batch, target_logp, values, bootstrap)
            rhos = pg_rhos(self, batch["action_logp"], target_logp)
        extra = {} if rhos is None else {"pg_rhos": rhos}
        return train_samples(self, batch, vs=vs, pg_advantages=pg_advantages, **extra)

    def loss(self, mb: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        cfg = self.config
        if "vs" in mb:  # a flat minibatch (or sequences) with its targets
            dist_inputs, values = self.model_outputs(mb)
            mb = self.train_rows(mb)
            dist = self.dist_class.from_inputs(dist_inputs)
            logp = dist.logp(mb["actions"])
            vs, pg_advantages, rhos = mb["vs"], mb["pg_advantages"], mb.get("pg_rhos")
            behaviour_inputs = mb["action_dist_inputs"]
            mask: torch.Tensor | slice = slice(None)
        else:  # the whole time-major batch
            dist_inputs, values, bootstrap = forward(mb, self.model)
            dist = self.dist_class.from_inputs(dist_inputs)
            logp = dist.logp(mb["actions"].flatten(0, 1)).reshape(values.shape)
            with torch.no_grad():
                vs, pg_advantages = targets(self, mb, logp.detach(), values.detach(),
                                            bootstrap.detach())
                rhos = pg_rhos(self, mb["action_logp"], logp.detach())
            mask = valid_rows(mb["mask"].bool().flatten())
            rhos = None if rhos is None else rhos.flatten()
            values, vs, pg_advantages = values.flatten(), vs.flatten(), pg_advantages.flatten()
            logp = logp.flatten()
            behaviour_inputs = mb["action_dist_inputs"].flatten(0, 1)
        advantages = centered(self, pg_advantages[mask], None if rhos is None else rhos[mask])
        policy_loss = -(logp[mask] * advantages).mean()
        vf_loss, entropy, stats = loss_terms(self, dist, values, vs, mask, behaviour_inputs)
        coeff = self.config.entropy_coeff_at(self.global_timestep)
        total = policy_loss + cfg.vf_loss_coeff * vf_loss - coeff * entropy
        return total, {"total_loss": total.detach(), "policy_loss": policy_loss.detach(),
                       "entropy_coeff": coeff, **stats}


class IMPALA(AsyncAlgorithm):
    """IMPALA on the rlmesh mesh: runners stream fragments (through aggregators, if any) to
    the learners, which train on V-trace targets (A3C's returns with ``vtrace=False``) and
    publish weights every ``broadcast_interval`` updates."""

    config_class = ImpalaConfig
    default_policy_class = ImpalaTorchPolicy
