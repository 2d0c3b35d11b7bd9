"""A learned policy against a fixed heuristic in rock-paper-scissors (PettingZoo classic
``rps``, 15 rounds an episode, +1 a round won, -1 lost): 'learned' (PPO) plays player_0,
'always_same' (a random move kept for the whole episode) plays player_1 and never trains.
Each agent sees the other's last move, so the learner can win every round but the first.

    python examples/rock_paper_scissors.py      # stops at a learned return of 6.0
"""

from __future__ import annotations

import numpy as np

from rlmesh.algorithms.ppo import PPOConfig
from rlmesh.policy.policy import Policy

ROCK, PAPER, SCISSORS = 0, 1, 2


class AlwaysSameHeuristic(Policy):
    """Plays one random move for a whole episode, kept as its recurrent state (-1 before the
    first move). Not trained: it learns nothing and has no weights."""

    def __init__(self, observation_space, action_space, config):
        super().__init__(observation_space, action_space, config)
        self.rng = np.random.default_rng()

    def seed(self, seed):
        self.rng = np.random.default_rng(seed)

    def get_initial_state(self):
        return [np.array(-1, np.int64)]

    def compute_actions(self, obs_batch, state_batches=None, prev_action_batch=None,
                        prev_reward_batch=None, explore=None, timestep=None, **kwargs):
        moves = np.asarray(state_batches[0]).copy()
        fresh = moves < 0
        moves[fresh] = self.rng.integers(3, size=int(fresh.sum()))
        return moves, [moves], {}

    def learn_on_batch(self, samples):
        return {}


class BeatLastHeuristic(AlwaysSameHeuristic):
    """Plays the move that beats the opponent's last one (its observation; 3: none yet)."""

    def compute_actions(self, obs_batch, state_batches=None, prev_action_batch=None,
                        prev_reward_batch=None, explore=None, timestep=None, **kwargs):
        last = np.asarray(obs_batch).reshape(-1)
        moves = np.where(last == 3, self.rng.integers(3, size=len(last)), (last + 1) % 3)
        return moves, list(state_batches or []), {}


def learned_vs_heuristic(agent_id, episode, **kwargs) -> str:
    return "learned" if agent_id == "player_0" else "always_same"


def config(seed: int = 0) -> PPOConfig:
    return (PPOConfig()
            .environment("rlmesh.env.pettingzoo:make", env_config={"name": "classic/rps-v2"})
            .env_runners(num_env_runners=1, num_envs_per_env_runner=8,
                         rollout_fragment_length="auto")
            .training(train_batch_size=960, minibatch_size=240, num_epochs=10, lr=1e-3,
                      gamma=0.9, lambda_=0.9, entropy_coeff=0.01, use_kl_loss=False,
                      vf_clip_param=None, model={"fcnet_hiddens": [64]})
            .multi_agent(policies={"learned": None,
                                   "always_same": (AlwaysSameHeuristic, None, None, {})},
                         policy_mapping_fn=learned_vs_heuristic,
                         policies_to_train=["learned"])
            .debugging(seed=seed))


def train(cfg: PPOConfig, stop_reward: float = 6.0, max_env_steps: int = 200_000,
          log: bool = True) -> dict:
    algo = cfg.build()
    try:
        while True:
            result = algo.train()
            learned = result["policy_reward_mean"].get("learned", float("nan"))
            if log:
                print(f"iter {result['training_iteration']:3d} env steps "
                      f"{result['timesteps_total']:7d} learned {learned:6.2f}")
            if learned >= stop_reward or result["timesteps_total"] >= max_env_steps:
                return result
    finally:
        algo.stop()


if __name__ == "__main__":
    train(config())
