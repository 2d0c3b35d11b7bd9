"""A2C, the synchronous advantage actor-critic (Mnih et al. 2016; OpenAI's A2C): its policy
(GAE advantages, policy-gradient, value and entropy terms, gradients accumulated over
microbatches) and the algorithm. A3C (``a3c.py``) trains the same loss asynchronously.

Each iteration samples ``train_batch_size`` env steps with the current policy from every
env runner, computes values and GAE on the learner, and takes one gradient step.
"""

from __future__ import annotations

from typing import Any

import torch

from rlmesh.algorithms.a2c_config import A2CConfig
from rlmesh.algorithms.advantages import gae_samples
from rlmesh.driver.algorithm import Algorithm
from rlmesh.policy.learner_stats import entropy_of, explained_variance
from rlmesh.policy.sgd import MinibatchSGD
from rlmesh.policy.torch_policy import TorchPolicy
from rlmesh.rl.optim import Adam, RMSprop, from_config

__all__ = ["A2C", "A2CConfig", "A2CTorchPolicy"]

Tensors = dict[str, torch.Tensor]


class A2CTorchPolicy(TorchPolicy):
    """The advantage actor-critic loss on GAE advantages (not standardized, as in RLlib),
    one gradient step per train batch, accumulated over ``microbatch_size`` parts, by
    ``opt_type``'s optimizer."""

    def make_optimizer(self) -> Adam | RMSprop:
        return from_config(self.config, self.model.parameters(), self.config.lr)

    def prepare_batch(self, batch: Tensors) -> Tensors:
        cfg = self.config
        flat = gae_samples(self.model, batch, cfg.gamma, cfg.gae_lambda())
        drop = ("values", "action_logp", "action_dist_inputs")  # what the loss never reads
        return {k: v for k, v in flat.items() if k not in drop}

    def loss(self, mb: Tensors) -> tuple[torch.Tensor, Tensors]:
        cfg = self.config
        dist_inputs, values = self.model_outputs(mb)
        mb = self.train_rows(mb)  # sequences: their real steps, flat
        dist = self.dist_class.from_inputs(dist_inputs)
        policy_loss = -(dist.logp(mb["actions"]) * mb["advantages"]).mean()
        vf_loss = (values - mb["value_targets"]).pow(2).mean()
        entropy = entropy_of(dist).mean()
        entropy_coeff = cfg.entropy_coeff_at(self.global_timestep)
        total = policy_loss + cfg.vf_loss_coeff * vf_loss - entropy_coeff * entropy
        return total, {"total_loss": total.detach(), "policy_loss": policy_loss.detach(),
                       "vf_loss": vf_loss.detach(), "entropy": entropy.detach(),
                       "entropy_coeff": entropy_coeff,
                       "vf_explained_var": explained_variance(mb["value_targets"], values)}

    def update(self, batch: dict[str, Any], timesteps: int, num_epochs: int | None = None,
               minibatch_size: int | None = None, num_minibatches: int | None = None
               ) -> dict[str, float]:
        """GAE (``prepare_batch``), then the one minibatch loop; with ``microbatch_size``
        each gradient step's gradient is summed over microbatches first. Each part's loss
        is a mean over its samples, so it is weighted by its share of the batch: the sum is
        the whole batch's gradient (RLlib sums unweighted, which scales the step with the
        number of parts)."""
        sgd = MinibatchSGD(self, timesteps)
        train = self.prepare_batch(sgd.on_device(batch))
        size = self.config.microbatch_size
        for mb in sgd.minibatches(train, num_epochs, minibatch_size, num_minibatches):
            n = len(mb["advantages"])
            if size is None or size >= n:
                with self.precision():
                    loss, stats = self.loss(mb)
                sgd.step(loss, stats)
                continue
            self.optimizer.zero_grad(set_to_none=True)
            stats = {}
            for start in range(0, n, size):
                part = {k: v[start:start + size] for k, v in mb.items()}
                share = len(part["advantages"]) / n
                with self.precision():
                    loss, part_stats = self.loss(part)
                (loss * share).backward()
                # Weighted like the losses: the batch's means (the explained variance, not
                # a mean itself, only roughly).
                for k, v in part_stats.items():
                    stats[k] = stats.get(k, 0.0) + share * float(v)
            sgd.apply(stats)
        return sgd.finish()


class A2C(Algorithm):
    """A2C on the rlmesh mesh: env runners sample ``train_batch_size`` steps, the learner
    takes one gradient step, the param server hands the new weights to the runners
    (``Algorithm.training_step``)."""

    config_class = A2CConfig
    default_policy_class = A2CTorchPolicy
