"""APPO: PPO's clipped surrogate on IMPALA's asynchronous pipeline, with V-trace advantages.

A target network, a copy of the policy refreshed every ``target_network_update_freq``
updates, is the policy V-trace corrects toward. With discrete actions it is also the anchor
of the surrogate's ratio (RLlib's form), so the ratio stays near 1 however old the runners'
weights are; with Box actions (``surrogate_anchor`` 'auto') the ratio is to the behaviour
policy, as PPO's: a Gaussian's density ratio at a stale action is far from 1, and against
the target network the clip stopped bounding the update (docs/benchmark_log.md, "V-trace on
continuous actions"). Optionally a KL term to the anchor, its coefficient adapting toward
``kl_target``.

With ``vtrace=False`` (RLlib's cartpole-appo.yaml) it is PPO on each fragment as it comes:
GAE advantages and value targets from the learner's critic (``use_gae``, ``lambda``,
``use_critic``), the ratio and the KL term to the behaviour policy, no target network.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import gymnasium as gym
import torch

from rlmesh.algorithms.appo_config import APPOConfig
from rlmesh.algorithms.ppo import adapt_kl_coeff
from rlmesh.algorithms.impala import (
    IMPALA, ImpalaTorchPolicy, centered, drop_last_step, evaluate, forward, gae_targets,
    targets, train_samples, valid_rows, whole_batch)
from rlmesh.policy.learner_stats import entropy_of, explained_variance
from rlmesh.policy.recurrent import is_recurrent, time_major_outputs
from rlmesh.rl.gae import discounted_returns

__all__ = ["APPO", "APPOConfig", "APPOTorchPolicy"]


def target_model(policy: Any) -> torch.nn.Module:
    """The learner's target network, made on first use as a copy of the policy."""
    target = getattr(policy, "target_model", None)
    if target is None:
        target = policy.target_model = copy.deepcopy(policy.model).requires_grad_(False)
    return target


class APPOTorchPolicy(ImpalaTorchPolicy):
    """APPO's part of a learner update: V-trace toward the target network (or GAE),
    clipped surrogate, value loss, entropy, optional KL."""

    @functools.cached_property
    def anchored_to_behaviour(self) -> bool:
        """Whether the surrogate's ratio and the KL term refer to the behaviour policy
        (``vtrace=False``; ``surrogate_anchor`` 'behaviour', or 'auto' with Box actions)
        rather than to the target network."""
        cfg = self.config
        if not cfg.vtrace:
            return True
        if cfg.surrogate_anchor == "auto":
            return isinstance(self.action_space, gym.spaces.Box)
        return cfg.surrogate_anchor == "behaviour"

    @functools.cached_property
    def pg_rho(self) -> bool:  # type: ignore[override]
        """Whether V-trace's advantages carry rho_pg (``vtrace_pg_rho``; 'auto': only when
        the ratio is to the target network, which has no weight to the behaviour policy
        of its own; pi/mu, the behaviour anchor's ratio, already is that weight)."""
        setting = self.config.vtrace_pg_rho
        return not self.anchored_to_behaviour if setting == "auto" else bool(setting)

    def on_policy_targets(self, batch: dict[str, torch.Tensor], values: torch.Tensor,
                          bootstrap: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``vtrace=False``: GAE's ``(value_targets, advantages)`` at ``lambda`` (1 without
        ``use_gae``); without ``use_critic`` the discounted returns, nothing bootstrapped,
        are the advantages (and the value loss is off)."""
        cfg = self.config
        if not cfg.use_critic:
            returns = discounted_returns(batch["rewards"], batch["terminateds"],
                                         batch["truncateds"], cfg.gamma).to(values.dtype)
            return returns, returns
        return gae_targets(batch, values, bootstrap, cfg.gamma, cfg.gae_lambda())

    def anchor(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """The distribution inputs ``[T*B, n]`` and log-probabilities ``[T, B]`` of the
        policy the surrogate's ratio and the KL term refer to: the target network under
        V-trace; with ``vtrace=False`` the behaviour policy, as in PPO (and RLlib)."""
        if not self.config.vtrace:
            return batch["action_dist_inputs"].flatten(0, 1), batch["action_logp"]
        target = target_model(self)
        old_inputs = (time_major_outputs(target, batch)[0] if is_recurrent(target)
                      else target(batch["obs"].flatten(0, 1))[0])
        old_logp = self.dist_class.from_inputs(old_inputs).logp(
            batch["actions"].flatten(0, 1)).reshape(batch["rewards"].shape)
        return old_inputs, old_logp

    def prepare_batch(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        if self.config.vtrace and self.config.vtrace_drop_last_ts:
            batch = drop_last_step(batch)
        with torch.no_grad():
            old_inputs, old_logp = self.anchor(batch)
            whole = whole_batch(self, batch)
            if whole is not None:  # the targets in the loss, from its own forward pass
                return {**whole, "old_logp": old_logp, "old_dist_inputs": old_inputs}
            _, values, bootstrap = evaluate(self, batch, self.model)
            vs, pg_advantages = targets(self, batch, old_logp, values, bootstrap)
        t, b = old_logp.shape
        return train_samples(self, batch, vs=vs, pg_advantages=pg_advantages, old_logp=old_logp,
                             old_dist_inputs=old_inputs.reshape(t, b, -1))

    def ratio(self, logp: torch.Tensor, behaviour: torch.Tensor, old_logp: torch.Tensor
              ) -> torch.Tensor:
        """The surrogate's ratio at each sample: pi/mu to the behaviour policy (PPO's; the
        log-ratio bounded, so no inf), or to the target network through the behaviour
        policy, pi/mu * mu/target, the second factor clipped to [0, 2] as in RLlib so that a
        stale sample cannot blow it up."""
        if self.anchored_to_behaviour:
            return torch.exp((logp - behaviour).clamp(-20.0, 20.0))
        return torch.exp(behaviour - old_logp).clamp(0.0, 2.0) * torch.exp(logp - behaviour)

    def loss(self, mb: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        cfg = self.config
        flat = "vs" in mb
        if flat:  # a flat minibatch (or sequences) with its targets
            dist_inputs, values = self.model_outputs(mb)
            mb = self.train_rows(mb)
            mask: torch.Tensor | slice = slice(None)
            actions, vs, adv = mb["actions"], mb["vs"], mb["pg_advantages"]
            behaviour, old_logp = mb["action_logp"], mb["old_logp"]
            behaviour_inputs = mb["action_dist_inputs"]
        else:  # the whole time-major batch
            dist_inputs, values, bootstrap = forward(mb, self.model)
            with torch.no_grad():
                vs, adv = targets(self, mb, mb["old_logp"], values.detach(),
                                  bootstrap.detach())
            mask = valid_rows(mb["mask"].flatten().bool())
            values, vs, adv = values.flatten(), vs.flatten(), adv.flatten()
            actions = mb["actions"].flatten(0, 1)
            behaviour, old_logp = mb["action_logp"].flatten(), mb["old_logp"].flatten()
            behaviour_inputs = mb["action_dist_inputs"].flatten(0, 1)
        dist = self.dist_class.from_inputs(dist_inputs)
        ratio = self.ratio(dist.logp(actions), behaviour, old_logp)[mask]
        anchor_inputs = (behaviour_inputs if self.anchored_to_behaviour
                         else mb["old_dist_inputs"])
        adv = centered(self, adv[mask])
        surrogate = torch.min(adv * ratio,
                              adv * torch.clamp(ratio, 1 - cfg.clip_param, 1 + cfg.clip_param))
        policy_loss = -surrogate.mean()
        coeff = self.config.entropy_coeff_at(self.global_timestep)
        total = policy_loss
        vf_loss = 0.5 * (values[mask] - vs[mask]).pow(2).mean()
        if cfg.vtrace or cfg.use_critic:
            total = total + cfg.vf_loss_coeff * vf_loss
        stats = {"policy_loss": policy_loss.detach(), "vf_loss": vf_loss.detach(),
                 "entropy_coeff": coeff}
        if coeff or not flat:
            entropy = entropy_of(dist)[mask].mean()
            total = total - coeff * entropy
            stats["entropy"] = entropy.detach()
        if cfg.use_kl_loss or not flat:
            kl = self.dist_class.from_inputs(anchor_inputs).kl(dist)[mask].mean()
            if cfg.use_kl_loss:
                total = total + self.state.setdefault("cur_kl_coeff", cfg.kl_coeff) * kl
            stats["mean_kl_loss"] = kl.detach()
        stats["total_loss"] = total.detach()
        if not flat:  # no update_stats for a whole batch: its statistics come from here
            with torch.no_grad():
                behaviour_kl = self.dist_class.from_inputs(behaviour_inputs).kl(dist)[mask]
                stats.update(
                    clip_fraction=((ratio - 1).abs() > cfg.clip_param).float().mean(),
                    behaviour_kl=behaviour_kl.mean(),
                    vf_explained_var=explained_variance(vs[mask], values[mask]))
        return total, stats

    def update_stats(self, train: dict[str, torch.Tensor], chunk: int) -> dict[str, Any]:
        """Minibatches' statistics, once per update on the whole batch after its passes
        (PPO's way: on every minibatch step they cost a dozen ops and a forward pass over
        the anchor): the entropy, the KL from the anchor (what the adaptive KL coefficient
        reads, as in the PPO paper) and from the behaviour policy, the fraction of samples
        outside the clip range and the value function's explained variance."""
        dist_inputs, values, rows = self.outputs_after_update(train, chunk)
        dist = self.dist_class.from_inputs(dist_inputs)
        ratio = self.ratio(dist.logp(rows["actions"]), rows["action_logp"], rows["old_logp"])
        behaviour = self.dist_class.from_inputs(rows["action_dist_inputs"])
        anchor = (behaviour if self.anchored_to_behaviour
                  else self.dist_class.from_inputs(rows["old_dist_inputs"]))
        return {"entropy": entropy_of(dist).mean(), "mean_kl_loss": anchor.kl(dist).mean(),
                "behaviour_kl": behaviour.kl(dist).mean(),
                "clip_fraction": ((ratio - 1).abs() > self.config.clip_param).float().mean(),
                "vf_explained_var": explained_variance(rows["vs"], values)}

    def after_update(self, stats: dict[str, float]) -> None:
        cfg = self.config
        if cfg.vtrace and self.num_updates % cfg.target_network_update_freq == 0:
            target_model(self).load_state_dict(self.model.state_dict())
            self.state["num_target_updates"] = self.state.get("num_target_updates", 0) + 1
        if cfg.use_kl_loss:
            adapt_kl_coeff(self, stats.get("mean_kl_loss", 0.0))


class APPO(IMPALA):
    """APPO on the rlmesh mesh: IMPALA's pipeline with APPO's policy."""

    config_class = APPOConfig
    default_policy_class = APPOTorchPolicy
