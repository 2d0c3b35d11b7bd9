"""A policy written from scratch against rlmesh's ``Policy`` contract, with no torch at all.

Run it:

    rlmesh train --run examples.custom_policy:RandomAlgo --env CartPole-v1 \
        --stop '{"training_iteration": 3}'
    python examples/custom_policy.py          # the same from Python, then the variants

or put it under another algorithm: ``PPOConfig().rl_module(policy_class=
"examples.custom_policy:MyPolicy")``. (From a checkout, run these from the repository root so
that ``examples`` is importable; every process of the run imports the class by that path.)

Three policies, each a small step from the one before:

- ``MyPolicy`` acts at random and "learns" by counting its updates into its weights, so you
  can watch weights travel: learner -> param server -> env runners.
- ``MyRNNPolicy`` has a recurrent state (a step counter): runners feed each step's state out
  back in, reset it when an episode starts, and record ``state_in_0`` / ``state_out_0``;
  it declares the optional columns ``t`` and ``eps_id`` (``view_requirements``).
- ``MyExtraOutputsPolicy`` returns an extra action output, ``some_value``, which arrives at
  the learner as a column of the same name.

Each ``learn_on_batch`` checks the columns it was given and reports what it found as
statistics: the learner may live in another process, so its stats are how we see inside.
"""

from __future__ import annotations

import numpy as np

from rlmesh.algorithms.algorithm_template import build_algorithm
from rlmesh.policy import Policy, SampleBatch


class MyPolicy(Policy):
    """Uniformly random actions (of a Discrete action space); one weight, ``num_updates``,
    that only the learner changes."""

    def __init__(self, observation_space, action_space, config):
        super().__init__(observation_space, action_space, config)
        self.rng = np.random.default_rng()
        self.num_updates = np.zeros(1, np.float32)

    def seed(self, seed):
        # Runners give every copy its own seed (the config's ``seed`` plus an offset).
        self.rng = np.random.default_rng(seed)

    # --- runner side: act ---

    def compute_actions(self, obs_batch, state_batches=None, prev_action_batch=None,
                        prev_reward_batch=None, explore=None, timestep=None, **kwargs):
        actions = self.rng.integers(self.action_space.n, size=len(obs_batch))
        return actions, [], {}  # (actions, state outs, extra outputs)

    # --- learner side: learn ---

    def learn_on_batch(self, samples: SampleBatch):
        self.num_updates += 1
        return {"num_samples": samples.count,
                "mean_step_reward": float(np.mean(samples[SampleBatch.REWARDS])),
                "num_updates": float(self.num_updates[0])}

    # --- weights: what the runners need to act as the learner's copy ---

    def get_weights(self):
        return {"num_updates": self.num_updates.copy()}

    def set_weights(self, weights):
        self.num_updates = np.asarray(weights["num_updates"], np.float32).copy()


class MyRNNPolicy(MyPolicy):
    """A recurrent policy whose state is the number of steps taken in the episode so far.

    Runners keep the state per env, pass it in as ``state_batches``, store what we return as
    the next step's input, and reset it to ``get_initial_state()`` when an episode starts.
    It also declares two optional columns the runners then record: ``t``, each step's index
    in its episode, and ``eps_id``, the episode's id; with them it checks its state.
    """

    view_requirements = {"t": None, "eps_id": None}

    def get_initial_state(self):
        return [np.zeros(1, np.float32)]  # one state tensor, of shape [1] per env

    def compute_actions(self, obs_batch, state_batches=None, prev_action_batch=None,
                        prev_reward_batch=None, explore=None, timestep=None, **kwargs):
        actions, _, extra = super().compute_actions(obs_batch)
        (steps,) = state_batches  # [N, 1]
        return actions, [steps + 1], extra

    def learn_on_batch(self, samples):
        stats = super().learn_on_batch(samples)
        state_in, state_out = samples["state_in_0"][:, 0], samples["state_out_0"][:, 0]
        t, episode = samples[SampleBatch.T], samples[SampleBatch.EPS_ID]
        # Rows i and i + 1 are consecutive steps of one episode: the state carries over.
        next_step = (episode[1:] == episode[:-1]) & (t[1:] == t[:-1] + 1)
        chained = state_in[1:][next_step] == state_out[:-1][next_step]
        return {**stats, "state_rows": float(len(state_in)),
                "state_chain_breaks": float(np.sum(~chained)),
                # The state counts the episode's steps: 0 at its start (reset), then +1.
                "state_differs_from_t": float(np.sum(state_in != t))}


class MyExtraOutputsPolicy(MyPolicy):
    """Returns ``some_value`` with every action: here the weight the action was taken with,
    so the learner can tell whether the runners act with its newest weights."""

    def compute_actions(self, obs_batch, state_batches=None, prev_action_batch=None,
                        prev_reward_batch=None, explore=None, timestep=None, **kwargs):
        actions, states, _ = super().compute_actions(obs_batch)
        some_value = np.full(len(obs_batch), self.num_updates[0], np.float32)
        return actions, states, {"some_value": some_value}

    def learn_on_batch(self, samples):
        acted_with = samples["some_value"]
        newest = self.num_updates[0]  # before this update: what was last published
        stats = super().learn_on_batch(samples)
        return {**stats, "some_value_rows": float(len(acted_with)),
                "some_value_mean": float(np.mean(acted_with)),
                "acted_with_newest_weights": float(np.mean(acted_with == newest))}


# An algorithm around it: Algorithm's default training_step (sample train_batch_size steps
# from every runner, update the policy on the learner, publish its weights) with our
# policy and a few defaults. The class must be assigned to the module-level name it is
# given: `--run examples.custom_policy:RandomAlgo` and checkpoints find it by that path.
RandomAlgo = build_algorithm(
    "RandomAlgo", default_policy=MyPolicy,
    default_config={"train_batch_size": 400, "num_env_runners": 1,
                    "num_envs_per_env_runner": 2})


if __name__ == "__main__":
    for policy_class in (MyPolicy, MyRNNPolicy, MyExtraOutputsPolicy):
        config = {"env": "CartPole-v1", "policy_class": policy_class, "seed": 0}
        with RandomAlgo(config) as algo:
            for _ in range(3):
                result = algo.train()
            stats = result["info"]["learner"]["default_policy"]
            print(f"{policy_class.__name__}: {result['timesteps_total']} steps, "
                  f"episode_reward_mean {result['episode_reward_mean']:.1f}")
            print("  learner saw:", {k: round(v, 3) for k, v in sorted(stats.items())})
