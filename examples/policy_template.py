"""The policy template, step by step: a policy-gradient algorithm from two functions.

Step 1 writes the loss of REINFORCE with the immediate reward as the weight of each
action's log-probability. It barely learns CartPole: every step's reward there is 1, so
the gradient pushes up whatever was done, good or bad. Step 2 adds a postprocessing
function that replaces the reward by the discounted return from that step on; the same
loss on returns learns CartPole in a few dozen thousand steps.

Run either (from the repository root):

    rlmesh train --run examples.policy_template:MyAlgo  --env CartPole-v1 --stop '{"timesteps_total": 40000}'
    rlmesh train --run examples.policy_template:MyAlgo2 --env CartPole-v1 --stop '{"timesteps_total": 40000}'
    python examples/policy_template.py       # both, side by side
"""

from __future__ import annotations

import numpy as np
import torch

from rlmesh.algorithms.algorithm_template import build_algorithm
from rlmesh.policy import SampleBatch, build_policy

# --- step 1: a loss, and a policy and an algorithm made from it ---


def policy_gradient_loss(policy, model, dist_class, train_batch):
    """-E[log pi(a|s) * r]: raise the probability of actions in proportion to their reward.

    ``model`` is the policy's torch model (the default MLP: ``model(obs)`` returns the
    action distribution's inputs and a value estimate, unused here); ``dist_class`` turns
    those inputs into a distribution over the env's actions; ``train_batch`` holds the
    sampled columns as tensors."""
    dist_inputs, _ = model(train_batch[SampleBatch.OBS])
    logp = dist_class(dist_inputs).logp(train_batch[SampleBatch.ACTIONS])
    return -torch.mean(logp * train_batch[SampleBatch.REWARDS])


# The class is made in this module: assign it to the name it is given, since the env
# runners and the learner import it by that path (nothing is pickled).
MyTorchPolicy = build_policy("MyTorchPolicy", loss_fn=policy_gradient_loss)

# Algorithm's default training step (sample train_batch_size steps, update, publish the
# weights) with our policy. One pass of one gradient step per batch, as REINFORCE does;
# complete episodes, so that every trajectory postprocessed in step 2 ends where its
# episode ends and its returns are whole.
MyAlgo = build_algorithm(
    "MyAlgo", default_policy=MyTorchPolicy,
    default_config={"train_batch_size": 2000, "lr": 0.005, "num_epochs": 1,
                    "minibatch_size": None, "batch_mode": "complete_episodes",
                    "num_env_runners": 1})


# --- step 2: postprocess each trajectory into discounted returns ---

GAMMA = 0.99


def calculate_returns(policy, sample_batch, other_agent_batches=None, episode=None):
    """Adds ``returns``: sum over k >= t of gamma^(k-t) r_k, for each step t of one trajectory.

    Runs on the learner, once per trajectory (one env's consecutive steps, in time
    order), before the loss; the columns it adds go into the train batch."""
    rewards = np.asarray(sample_batch[SampleBatch.REWARDS], np.float32)
    returns = np.zeros_like(rewards)
    running = 0.0
    for t in reversed(range(len(rewards))):
        running = rewards[t] + GAMMA * running
        returns[t] = running
    sample_batch["returns"] = returns
    return sample_batch


def returns_loss(policy, model, dist_class, train_batch):
    """The loss of step 1 with the return in place of the reward."""
    dist_inputs, _ = model(train_batch[SampleBatch.OBS])
    logp = dist_class(dist_inputs).logp(train_batch[SampleBatch.ACTIONS])
    return -torch.mean(logp * train_batch["returns"])


# with_updates: a new class from the template's functions with some of them replaced.
MyTorchPolicy2 = MyTorchPolicy.with_updates(
    name="MyTorchPolicy2", postprocess_fn=calculate_returns, loss_fn=returns_loss)
MyAlgo2 = MyAlgo.with_updates(name="MyAlgo2", default_policy=MyTorchPolicy2)


def train(algo_class, env_steps: int, seed: int = 0) -> list[float]:
    """``episode_reward_mean`` after each iteration until ``env_steps`` steps."""
    curve = []
    with algo_class({"env": "CartPole-v1", "seed": seed}) as algo:
        while not curve or result["timesteps_total"] < env_steps:
            result = algo.train()
            curve.append(result["episode_reward_mean"])
    return curve


if __name__ == "__main__":
    for algo_class in (MyAlgo, MyAlgo2):
        curve = train(algo_class, 40_000)
        print(f"{algo_class.__name__}: episode_reward_mean "
              + " ".join(f"{r:.0f}" for r in curve[::4]) + f" ... {curve[-1]:.1f}")
