"""Vanilla policy gradient, REINFORCE (Williams 1992): its policy (discounted returns over
the time-major batch, the score-function loss) and the algorithm.

Synchronous, as PPO: each iteration samples ``train_batch_size`` env steps of complete
episodes with the current policy, then takes one gradient step on all of them.
"""

from __future__ import annotations

import torch

from rlmesh.algorithms.advantages import standardized
from rlmesh.driver.algorithm import Algorithm
from rlmesh.algorithms.pg_config import PGConfig
from rlmesh.policy.learner_stats import entropy_of
from rlmesh.policy.torch_policy import TorchPolicy
from rlmesh.rl.gae import discounted_returns

__all__ = ["PG", "PGConfig", "PGTorchPolicy"]


class PGTorchPolicy(TorchPolicy):
    """Each action's log-probability weighted by the discounted return that followed it.
    No critic: the model's value head is built (the default model has one) but untrained."""

    def prepare_batch(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        cfg = self.config
        # Complete episodes (PGConfig insists), so the returns need no bootstrap value.
        returns = discounted_returns(batch["rewards"], batch["terminateds"],
                                     batch["truncateds"], cfg.gamma)
        valid = batch["mask"]
        flat = {"obs": batch["obs"][valid], "actions": batch["actions"][valid],
                "returns": returns[valid]}
        if cfg.standardize_returns:
            flat["returns"] = standardized(flat["returns"])
        return flat

    def loss(self, mb: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        dist = self.dist_class.from_inputs(self.model(mb["obs"])[0])
        policy_loss = -(dist.logp(mb["actions"]) * mb["returns"]).mean()
        return policy_loss, {"policy_loss": policy_loss.detach(),
                             "entropy": entropy_of(dist).mean().detach(),
                             "mean_return": mb["returns"].mean()}


class PG(Algorithm):
    """PG on the rlmesh mesh: sample ``train_batch_size`` steps of complete episodes, one
    gradient step, publish the weights (``Algorithm.training_step``)."""

    config_class = PGConfig
    default_policy_class = PGTorchPolicy
