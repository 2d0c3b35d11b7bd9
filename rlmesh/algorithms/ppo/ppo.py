"""PPO (Schulman et al. 2017), top to bottom: the driver's training step, then the learner's
update (GAE, epochs of shuffled minibatches), then the loss.

Synchronous: each iteration samples ``train_batch_size`` env steps with the current
policy (policy lag 0), computes values and GAE on the learner's device, then runs
``num_epochs`` passes of minibatch SGD on the clipped surrogate. With ``sample_async`` the
runners sample the next batch during the update, with the weights of the update before
(policy lag 1): the ratio is to the policy that acted (``action_logp``), so the clipped
surrogate still bounds the step from it.

From ``Algorithm.train()`` to the loss, with the learner in the driver (``num_learners=0``):
train -> training_iteration -> run_iteration (``min_time_s_per_iteration``) ->
PPO.training_step -> update_learners -> Learner.update_from_batch -> TorchPolicy.update
(the one minibatch loop: ``prepare_batch``, then ``loss`` per minibatch) -> PPOTorchPolicy.loss.
"""

from __future__ import annotations

import torch

from rlmesh.algorithms.advantages import gae_samples, standardized
from rlmesh.algorithms.ppo_config import PPOConfig
from rlmesh.driver.algorithm import Algorithm
from rlmesh.policy.learner_stats import entropy_of, explained_variance
from rlmesh.policy.torch_policy import TorchPolicy

__all__ = ["PPO", "PPOConfig", "PPOTorchPolicy"]


class PPO(Algorithm):
    """PPO on the rlmesh mesh: env runners sample ``train_batch_size`` steps, the learners
    (data-parallel when ``num_learners`` > 1) update, the param server hands the new weights
    to the runners."""

    config_class = PPOConfig
    default_policy_class = "rlmesh.algorithms.ppo.ppo:PPOTorchPolicy"

    def training_step(self) -> dict[str, dict[str, float]]:
        """Sample ``train_batch_size`` env steps -> update the learners (each policy's
        ``update``: ``prepare_batch`` and ``loss`` below) -> publish the new weights to the
        runners; learner statistics by policy id. The steps are Algorithm's, named here."""
        fragments = self.sample_train_batch()
        stats = self.update_learners(fragments)
        self.publish_trained(stats)
        return stats or {}


class PPOTorchPolicy(TorchPolicy):
    """PPO's learner side. Its ``update`` is the one minibatch loop (``TorchPolicy.update``):
    values and GAE advantages (``prepare_batch``), then ``num_epochs`` passes over shuffled
    minibatches of ``minibatch_size``, one gradient step on each one's ``loss`` (the clipped
    surrogate, the value loss, the entropy bonus, the adaptive KL penalty), then the
    diagnostics and the KL coefficient (``update_stats``, ``after_update``)."""

    def prepare_batch(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The flat train samples with values, GAE advantages (standardized) and value
        targets, computed over the time-major batch on the learner's device."""
        cfg = self.config
        flat = gae_samples(self.model, batch, cfg.gamma, cfg.gae_lambda())
        flat["advantages"] = standardized(flat["advantages"], flat.get("seq_mask"))
        return flat

    def loss(self, mb: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The terms that have a gradient: the clipped surrogate, the value loss, and the
        entropy bonus and KL penalty where they are on. The diagnostics are computed once
        per update, in ``update_stats``."""
        cfg = self.config
        dist_inputs, values = self.model_outputs(mb)
        mb = self.train_rows(mb)  # sequences: their real steps, flat
        dist = self.dist_class.from_inputs(dist_inputs)
        ratio = torch.exp(dist.logp(mb["actions"]) - mb["action_logp"])
        adv = mb["advantages"]
        surrogate = torch.min(adv * ratio,
                              adv * torch.clamp(ratio, 1 - cfg.clip_param, 1 + cfg.clip_param))
        policy_loss = -surrogate.mean()
        total = policy_loss
        stats = {"policy_loss": policy_loss.detach()}
        if cfg.use_critic:
            vf_error = (values - mb["value_targets"]).pow(2)
            vf_loss = (vf_error if cfg.vf_clip_param is None
                       else torch.clamp(vf_error, 0, cfg.vf_clip_param)).mean()
            total = total + cfg.vf_loss_coeff * vf_loss
            stats.update(vf_loss=vf_loss.detach(), vf_loss_unclipped=vf_error.detach().mean())
        entropy_coeff = cfg.entropy_coeff_at(self.global_timestep)
        if entropy_coeff:
            total = total - entropy_coeff * entropy_of(dist).mean()
        if cfg.use_kl_loss:
            kl = self.dist_class.from_inputs(mb["action_dist_inputs"]).kl(dist).mean()
            total = total + self.state.setdefault("cur_kl_coeff", cfg.kl_coeff) * kl
        return total, {"total_loss": total.detach(), **stats}

    def update_stats(self, train: dict[str, torch.Tensor], chunk: int) -> dict[str, object]:
        """The policy after the update against the batch it learned from: its entropy, its
        KL from the behaviour policy (what the adaptive KL coefficient reads, as in the PPO
        paper), the fraction of samples outside the clip range, the value function's
        explained variance. One forward pass, not a dozen ops on every minibatch step (they
        were 8-15% of a CartPole update)."""
        cfg = self.config
        dist_inputs, values, rows = self.outputs_after_update(train, chunk)
        dist = self.dist_class.from_inputs(dist_inputs)
        ratio = torch.exp(dist.logp(rows["actions"]) - rows["action_logp"])
        behaviour = self.dist_class.from_inputs(rows["action_dist_inputs"])
        return {"entropy": entropy_of(dist).mean(), "mean_kl_loss": behaviour.kl(dist).mean(),
                "clip_fraction": ((ratio - 1).abs() > cfg.clip_param).float().mean(),
                "vf_explained_var": explained_variance(rows["value_targets"], values),
                "entropy_coeff": cfg.entropy_coeff_at(self.global_timestep)}

    def after_update(self, stats: dict[str, float]) -> None:
        if self.config.use_kl_loss:
            adapt_kl_coeff(self, stats.get("mean_kl_loss", 0.0))


def adapt_kl_coeff(policy: TorchPolicy, kl: float) -> None:
    """The adaptive KL penalty of the PPO paper, with RLlib's factors: the coefficient
    x1.5 when the KL of the update exceeds twice ``kl_target``, x0.5 below half of it."""
    cfg = policy.config
    coeff = policy.state.setdefault("cur_kl_coeff", cfg.kl_coeff)
    if kl > 2.0 * cfg.kl_target:
        coeff *= 1.5
    elif kl < 0.5 * cfg.kl_target:
        coeff *= 0.5
    policy.state["cur_kl_coeff"] = coeff
