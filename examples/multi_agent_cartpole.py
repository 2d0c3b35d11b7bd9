"""Multi-agent CartPole (RLlib's multi_agent_cartpole): N independent CartPoles in one env,
acting with one shared policy or with a policy each. The run stops at a combined return
(the sum over the agents) of 600, as RLlib's example does.

    python -m examples.multi_agent_cartpole --num-policies 2 --num-agents 2   # from the repository root
"""

from __future__ import annotations

import argparse

from rlmesh.algorithms.ppo import PPOConfig
from rlmesh.env import make_multi_agent

MultiAgentCartPole = make_multi_agent("CartPole-v1")


def make_env(env_config: dict) -> MultiAgentCartPole:
    return MultiAgentCartPole(env_config)


def policy_per_agent(agent_id, episode, **kwargs) -> str:
    """Agent i acts with policy 'p<i mod 2>'."""
    return f"p{agent_id % 2}"


def shared_policy(agent_id, episode, **kwargs) -> str:
    return "shared"


def config(num_agents: int = 2, num_policies: int = 2, seed: int = 0) -> PPOConfig:
    """PPO with the tuned CartPole settings (rlmesh/tuned_examples/cartpole-ppo.yaml), a
    train batch of 512 env steps (each one step of every agent)."""
    policies = {"shared"} if num_policies == 1 else {"p0", "p1"}
    return (PPOConfig()
            .environment("examples.multi_agent_cartpole:make_env",
                         env_config={"num_agents": num_agents})
            .env_runners(num_env_runners=1, num_envs_per_env_runner=8,
                         rollout_fragment_length="auto")
            .training(train_batch_size=512, minibatch_size=256, num_epochs=10, lr=0.002,
                      lr_schedule=[[0, 0.002], [100000, 0.0]], gamma=0.98, lambda_=0.8,
                      clip_param=0.2, use_kl_loss=False, entropy_coeff=0.0, vf_loss_coeff=0.5,
                      vf_clip_param=None, grad_clip=0.5, grad_clip_by="global_norm",
                      model={"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh",
                             "vf_share_layers": False})
            .multi_agent(policies=policies,
                         policy_mapping_fn=shared_policy if num_policies == 1 else policy_per_agent)
            .debugging(seed=seed))


def train(cfg: PPOConfig, stop_reward: float = 600.0, max_env_steps: int = 100_000,
          log: bool = True) -> dict:
    """Train until the combined return reaches ``stop_reward``; the last result."""
    algo = cfg.build()
    try:
        while True:
            result = algo.train()
            if log:
                print(f"iter {result['training_iteration']:3d} env steps "
                      f"{result['timesteps_total']:7d} combined {result['episode_reward_mean']:7.1f} "
                      f"per policy {({p: round(r, 1) for p, r in result['policy_reward_mean'].items()})}")
            if result["episode_reward_mean"] >= stop_reward or result["timesteps_total"] >= max_env_steps:
                return result
    finally:
        algo.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-agents", type=int, default=2)
    parser.add_argument("--num-policies", type=int, default=2, choices=(1, 2))
    args = parser.parse_args()
    train(config(args.num_agents, args.num_policies))
