"""A learner connector (RLlib's ConnectorV2) that adds an exploration bonus to the rewards
before PPO computes its advantages: count-based curiosity, ``beta / sqrt(N(s))`` for the
observation ``s`` an action led to, where ``N`` counts how often the learner has seen it.

The connector changes the rewards in the learner's batch through its episodes
(``episode.set_rewards``), so GAE and PPO's loss see the shaped rewards; it logs the mean
bonus and the states seen to the learner's MetricsLogger (``result["learners"]
["__all_modules__"]``). The env is FrozenLake 8x8, not slippery: the only reward is 1 at
the goal, 14 moves away.

What it shows is the mechanism, not a gain: on this map PPO's own exploration (8 envs,
entropy bonus 0.01) finds the goal quickly, and the bonus only pulls the policy away from
it. Measured (2-vCPU VM, seed 0): a mean return of 0.9 at 24,576 env steps without the
bonus, at 45,056 with beta 0.1 (on a 12x12 map: 22,528 without, 102,400 with beta 0.2).
Count-based bonuses pay where random exploration never reaches the reward.

    python -m examples.count_based_curiosity              # with the bonus
    python -m examples.count_based_curiosity --beta 0     # without, to compare
"""

from __future__ import annotations

import argparse
import collections
import math

from rlmesh.algorithms import PPOConfig  # no torch here: the connector crosses to processes that need none
from rlmesh.connectors.connector_v2 import ConnectorV2


class CountBasedCuriosity(ConnectorV2):
    """Rewards plus ``beta / sqrt(visits)`` of each step's next observation (a Discrete
    observation, or any observation rounded to ``decimals``)."""

    def __init__(self, input_observation_space=None, input_action_space=None, *,
                 beta: float = 0.1, cell: tuple[float, ...] | None = None, **kwargs):
        super().__init__(input_observation_space, input_action_space, **kwargs)
        self.beta, self.cell = beta, cell
        self.visits: collections.Counter = collections.Counter()

    def _key(self, observation) -> object:
        """The count's key: a Discrete observation itself, a Box one's grid cell (``cell``:
        the cell's size along each dimension)."""
        if self.cell is None:
            return int(observation)
        return tuple(math.floor(float(x) / c) for x, c in zip(observation, self.cell))

    def __call__(self, *, rl_module, batch, episodes, explore=None, shared_data=None,
                 metrics=None, **kwargs):
        bonuses = []
        for episode in self.single_agent_episode_iterator(episodes, agents_that_stepped_only=False):
            # the observation each step led to: the next step's, and for the last step the
            # one after it, which the learner does not hold (so that step keeps its reward)
            after = episode.get_observations()[1:]
            rewards = episode.get_rewards()
            shaped = list(rewards)
            for i, observation in enumerate(after):
                key = self._key(observation)
                self.visits[key] += 1
                bonus = self.beta / math.sqrt(self.visits[key])
                shaped[i] += bonus
                bonuses.append(bonus)
            episode.set_rewards(new_data=shaped)
        if metrics is not None and bonuses:
            metrics.log_value("curiosity_bonus_mean", sum(bonuses) / len(bonuses))
            metrics.log_value("curiosity_states_seen", len(self.visits), reduce="max")
        return batch


def config(beta: float = 0.1, seed: int = 0) -> PPOConfig:
    return (PPOConfig()
            .environment("FrozenLake-v1", env_config={"map_name": "8x8", "is_slippery": False})
            .env_runners(num_env_runners=1, num_envs_per_env_runner=8)
            .training(train_batch_size=2048, minibatch_size=256, num_epochs=8, lr=0.0005,
                      gamma=0.99, entropy_coeff=0.01,
                      learner_connector=lambda obs_space, act_space: CountBasedCuriosity(
                          beta=beta))
            .debugging(seed=seed))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--beta", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    from examples.custom_rl_module import train  # until the return, printing each iteration

    result = train(config(args.beta, args.seed), 0.9)
    print("the learner's metrics:", result["learners"].get("__all_modules__"))
