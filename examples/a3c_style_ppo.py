"""PPO's loss trained the A3C way: a ``training_step()`` override, the successor of RLlib's
execution plans, written with the public helpers of ``algo.env_runners`` and
``algo.learner_group``. The same flow as RLlib's execution plan (``AsyncGradients`` ->
``ApplyGradients(update_all=False)`` -> ``StandardMetricsReporting``, from
``rlmesh.execution``) is ``PPO.with_updates(execution_plan=...)``: docs/policies.md.

PPO's own step samples a train batch from every runner, updates on the learner and
publishes the weights to all runners at once. Here instead each env runner samples a
fragment and computes the gradients of the loss on its own copy of the policy; the
learner applies each runner's gradients as soon as they arrive, and sends the new
weights back to that runner only, which then samples its next fragment. No runner waits
for another; the price is A3C's: a runner's gradients are computed on weights that miss
the steps the other runners' gradients made meanwhile.

Run it (from the repository root; CartPole reaches a mean reward of 150 in about 20k env
steps):

    rlmesh train --run examples.a3c_style_ppo:A3CStylePPO --env CartPole-v1 \
        --stop '{"episode_reward_mean": 150}'
    python examples/a3c_style_ppo.py
"""

from __future__ import annotations

from dataclasses import dataclass

from rlmesh.algorithms.ppo import PPO, PPOConfig, PPOTorchPolicy
from rlmesh.policy.policy import class_path


@dataclass(kw_only=True)
class A3CStylePPOConfig(PPOConfig, defaults={
        "rollout_fragment_length": 50, "num_env_runners": 2, "num_envs_per_env_runner": 4,
        "lr": 1e-3, "grad_clip": 1.0, "train_batch_size": 2000,
        # One gradient per 200 env steps: the KL penalty, lambda 1 and the wider net of
        # RLlib's PPO defaults suit it (measured with them: 85-94 after 12k steps).
        "lambda_": 1.0, "use_kl_loss": True, "vf_loss_coeff": 1.0, "clip_param": 0.3,
        "vf_clip_param": 10.0, "model": {**PPOConfig().model, "fcnet_hiddens": [256, 256]}}):
    """PPO's settings, with defaults for small and frequent gradient steps: each runner's
    4 envs x 50 steps = 200 env steps per gradient; an iteration is 2000 env steps."""

    algorithm_path = "examples.a3c_style_ppo:A3CStylePPO"


class PPOGradientsPolicy(PPOTorchPolicy):
    """PPO's policy, acting on the runners as itself (with torch) instead of as the default
    numpy copy of its model: the runners compute gradients with it."""

    @classmethod
    def runner_class(cls, config):
        return class_path(cls)


class A3CStylePPO(PPO):
    """PPO's loss, A3C's data flow."""

    config_class = A3CStylePPOConfig
    default_policy_class = PPOGradientsPolicy

    def training_step(self):
        """Apply runners' gradients one fragment at a time until ``train_batch_size`` env
        steps have been learned from; the last gradient statistics by policy id."""
        runners, learners = self.env_runners, self.learner_group
        stats, trained = {}, {}
        while sum(trained.values()) < self.config.train_batch_size:
            # Every idle runner: sample a fragment with its weights, return its gradients.
            runners.foreach_env_runner_async("sample_and_compute_gradients")
            for worker_index, result in runners.fetch_ready_async_reqs():
                runners.record([result])  # its episodes and env steps, for the result
                pid = result["policy_id"]
                with self.timer("learn_time_s"):
                    learners.apply_gradients({pid: result["gradients"]},
                                             timesteps=self.timesteps_sampled)
                runners.sync_weights([pid], to_worker_indices=[worker_index])
                trained[pid] = trained.get(pid, 0) + result["env_steps"]
                stats[pid] = {**result["stats"], "num_env_steps_trained": trained[pid]}
        # Once an iteration, the newest weights to the param server too: a runner that was
        # restarted starts from them, and so does the driver's copy (get_policy).
        runners.sync_weights()
        return stats


if __name__ == "__main__":
    config = A3CStylePPOConfig().environment("CartPole-v1").debugging(seed=0)
    with A3CStylePPO(config) as algo:
        for _ in range(10):
            result = algo.train()
            print(f"iter {result['training_iteration']:2d}  steps {result['timesteps_total']:6d}"
                  f"  episode_reward_mean {result['episode_reward_mean']:6.1f}")
