"""Policies, algorithms and functions the custom-policy tests send to other processes by
import path: some that keep the contract and report what they were given, some that break it."""

from __future__ import annotations

import numpy as np
import torch

from examples.custom_policy import MyRNNPolicy
from rlmesh.algorithms.algorithm_template import build_algorithm
from rlmesh.policy import Policy, build_policy

# --- policies that keep the contract ---


class EpisodeStepRNNPolicy(MyRNNPolicy):
    """The example's step-counting RNN policy on CountEnv, whose obs[0] is the number of
    steps taken in the episode: the recurrent state must equal it at every step, across
    fragment edges (state carried over) and episode starts (state reset)."""

    def learn_on_batch(self, samples):
        stats = super().learn_on_batch(samples)
        steps = samples["obs"][:, 0]
        return {**stats, "state_differs_from_episode_step":
                float(np.sum(samples["state_in_0"][:, 0] != steps))}


# --- functions for foreach_env_runner / foreach_env ---


def runner_weights(env_runner) -> dict:
    """What an env runner acts with: its worker index and its policy's weights."""
    weights = env_runner.policy.get_weights()
    return {"worker_index": env_runner.worker_index,
            **{k: np.asarray(v).tolist() for k, v in weights.items()}}


def env_id(env, suffix: str) -> str:
    return env.spec.id + suffix


# --- policies that break it ---


class NotAPolicy:
    def compute_actions(self, obs_batch, *args, **kwargs):
        return np.zeros(len(obs_batch), np.int64), [], {}


class ActsButCannotLearn(Policy):
    """compute_actions but no learn_on_batch."""

    def compute_actions(self, obs_batch, *args, **kwargs):
        return np.zeros(len(obs_batch), np.int64), [], {}


def loss_reading_returns(policy, model, dist_class, train_batch):
    """A loss that reads "returns" with no postprocess_fn to add them."""
    dist_inputs, _ = model(train_batch["obs"])
    logp = dist_class(dist_inputs).logp(train_batch["actions"])
    return -torch.mean(logp * train_batch["returns"])


ReturnsWithoutPostprocess = build_policy("ReturnsWithoutPostprocess", loss_fn=loss_reading_returns)
MissingColumnAlgo = build_algorithm(
    "MissingColumnAlgo", default_policy=ReturnsWithoutPostprocess,
    default_config={"train_batch_size": 200, "num_env_runners": 1, "num_learners": 1})


def loss_with_a_bug(policy, model, dist_class, train_batch):
    """A loss that raises, as a user's bug would, on the learner."""
    raise ValueError("a bug in the loss (policies_for_tests.loss_with_a_bug)")


BuggyLossPolicy = build_policy("BuggyLossPolicy", loss_fn=loss_with_a_bug)
BuggyLossAlgo = build_algorithm(
    "BuggyLossAlgo", default_policy=BuggyLossPolicy,
    default_config={"train_batch_size": 200, "num_env_runners": 1, "num_learners": 1})


def loss_out_of_memory(policy, model, dist_class, train_batch):
    """What torch raises when the GPU's allocator gives up (no GPU here to run out of)."""
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")


OutOfMemoryPolicy = build_policy("OutOfMemoryPolicy", loss_fn=loss_out_of_memory)
OutOfMemoryAlgo = build_algorithm(
    "OutOfMemoryAlgo", default_policy=OutOfMemoryPolicy,
    default_config={"train_batch_size": 200, "num_env_runners": 1})
