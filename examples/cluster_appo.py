"""A cluster job as a script: `rlmesh launch` runs it on the head with `[job] script =
"examples/cluster_appo.py"` (and `args = ["20"]`), and every algorithm it builds places its
env runners and learner on the cluster's nodes; run alone, it trains on this machine.

Usage: python examples/cluster_appo.py [ITERATIONS]
"""

import sys

from rlmesh.algorithms.appo import APPOConfig


def main(iterations: int) -> None:
    config = (APPOConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=2, num_envs_per_env_runner=8)
              .learners(num_learners=1)
              .training(lr=1e-3, vf_loss_coeff=0.5, entropy_coeff=0.0,
                        model={"fcnet_hiddens": [64, 64], "vf_share_layers": False})
              .reporting(min_time_s_per_reporting=1))
    with config.build() as algo:
        for _ in range(iterations):
            result = algo.train()
            print(f"iteration {result['training_iteration']}: mean reward "
                  f"{result['episode_reward_mean']:.1f}, {result['timesteps_total']} env steps, "
                  f"policy lag {result['policy_lag_mean']:.1f}", flush=True)
            if result["episode_reward_mean"] >= 450:
                break
        path = algo.save()
        print(f"checkpoint: {path}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
