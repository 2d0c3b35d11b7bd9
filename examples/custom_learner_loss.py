"""PPO with a loss of your own, the RLlib way: a ``Learner`` subclass whose
``compute_loss_for_module`` adds an entropy bonus and an L2 penalty on the weights to PPO's
own loss (the clipped surrogate and the value loss), named in the config as
``learner_class``. The learner runs in a process of its own (``num_learners=1``): rlmesh
sends the class there by its import path (this script's file, run there without its
``__main__`` block), as it does a policy class.

Run it (from the repository root; CartPole-v1 reaches a mean reward of 150 in about 20k env
steps):

    python examples/custom_learner_loss.py
    python examples/custom_learner_loss.py --stop-reward 100 --num-learners 0

docs/learner.md documents the hooks.
"""

from __future__ import annotations

import argparse

import torch

from rlmesh.algorithms.ppo import PPOConfig
from rlmesh.core.learner import Learner

ENTROPY_BONUS = 0.01  # PPO's own entropy_coeff is left at 0: the bonus comes from here
L2_PENALTY = 1e-5


class EntropyL2Learner(Learner):
    """PPO's loss, minus an entropy bonus, plus an L2 penalty on the policy's weights."""

    def compute_loss_for_module(self, *, module_id, config, batch, fwd_out):
        ppo_loss = super().compute_loss_for_module(module_id=module_id, config=config,
                                                   batch=batch, fwd_out=fwd_out)
        policy = self.policies[module_id]
        dist = policy.dist_class.from_inputs(fwd_out["action_dist_inputs"])
        entropy = dist.entropy().mean()
        l2 = torch.stack([p.pow(2).sum() for p in self.module[module_id].parameters()]).sum()
        loss = ppo_loss - ENTROPY_BONUS * entropy + L2_PENALTY * l2
        # Extra statistics land in result["info"]["learner"][module_id].
        return loss, {"entropy_bonus": entropy.detach(), "l2_norm": l2.detach()}


def config(num_learners: int = 1, seed: int | None = 0) -> PPOConfig:
    return (PPOConfig().environment("CartPole-v1")
            .env_runners(num_env_runners=1, num_envs_per_env_runner=4)
            .training(learner_class=EntropyL2Learner, train_batch_size=1000, minibatch_size=250,
                      num_epochs=6, lr=1e-3, entropy_coeff=0.0,
                      model={"fcnet_hiddens": [64, 64]})
            .learners(num_learners=num_learners)
            .debugging(seed=seed))


def main(stop_reward: float = 150.0, max_iterations: int = 60, num_learners: int = 1) -> dict:
    """Train until the mean episode reward reaches ``stop_reward``; the last result."""
    with config(num_learners).build() as algo:
        for _ in range(max_iterations):
            result = algo.train()
            stats = result["info"]["learner"]["default_policy"]
            print(f"iter {result['training_iteration']:3d}  reward "
                  f"{result['episode_reward_mean']:6.1f}  entropy {stats['entropy_bonus']:.3f}"
                  f"  l2 {stats['l2_norm']:.1f}")
            if result["episode_reward_mean"] >= stop_reward:
                break
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stop-reward", type=float, default=150.0)
    parser.add_argument("--max-iterations", type=int, default=60)
    parser.add_argument("--num-learners", type=int, default=1)
    args = parser.parse_args()
    last = main(args.stop_reward, args.max_iterations, args.num_learners)
    raise SystemExit(0 if last["episode_reward_mean"] >= args.stop_reward else 1)
