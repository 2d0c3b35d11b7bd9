"""An algorithm reads top to bottom (issue 33): at most five frames from where an iteration
starts to the algorithm's loss. Measured on real one-iteration runs: the loss records the
stack it runs under (``frame_policies.py``), the test counts the frames from ``train`` (the
learner in the driver, ``num_learners=0``) or, for IMPALA, whose learner always has a
process of its own, from the learner actor's update thread (``LearnerActor._run``)."""

from __future__ import annotations

import json

import pytest

from rlmesh.algorithms.dqn import DQNConfig
from rlmesh.algorithms.impala import ImpalaConfig
from rlmesh.algorithms.ppo import PPOConfig

from .frame_policies import STACK_FILE

HERE = "tests.integration.frame_policies"
MAX_FRAMES = 5


def frames_to_loss(stack: list[list[str]], top: str, top_file: str) -> list[str]:
    """The functions of the frames from the loss (first) up to and including the outermost
    one that counts (``top`` in ``top_file``); fails if that frame is not on the stack."""
    assert stack[0][0] == "loss", stack
    for i, (function, filename) in enumerate(stack):
        if function == top and filename == top_file:
            return [f for f, _ in stack[:i + 1]]
    raise AssertionError(f"{top} ({top_file}) is not on the loss's stack: {stack}")


def recorded(tmp_path, monkeypatch, config) -> list[list[str]]:
    path = tmp_path / "stack.json"
    monkeypatch.setenv(STACK_FILE, str(path))
    with config.build() as algo:
        algo.train()
    assert path.exists(), "the loss never ran"
    return json.loads(path.read_text())


def test_ppo_loss_is_at_most_five_frames_below_train(tmp_path, monkeypatch):
    config = (PPOConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=1, num_envs_per_env_runner=2)
              .training(train_batch_size=200, minibatch_size=64, num_epochs=2)
              .learners(num_learners=0)
              .rl_module(policy_class=f"{HERE}:StackPPOPolicy"))
    frames = frames_to_loss(recorded(tmp_path, monkeypatch, config), "train", "algorithm.py")
    assert len(frames) <= MAX_FRAMES, " <- ".join(frames)
    assert frames[1:3] == ["update", "update_from_batch"], frames  # PPOTorchPolicy.update


def test_dqn_loss_is_at_most_five_frames_below_train(tmp_path, monkeypatch):
    config = (DQNConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=1, rollout_fragment_length=4)
              .training(train_batch_size=32, num_steps_sampled_before_learning_starts=64)
              .reporting(min_sample_timesteps_per_iteration=200)
              .learners(num_learners=0)
              .rl_module(policy_class=f"{HERE}:StackDQNPolicy"))
    frames = frames_to_loss(recorded(tmp_path, monkeypatch, config), "train", "algorithm.py")
    assert len(frames) <= MAX_FRAMES, " <- ".join(frames)


@pytest.mark.parametrize("minibatch_size", [None, 100])
def test_impala_loss_is_at_most_five_frames_below_the_learner_loop(tmp_path, monkeypatch,
                                                                   minibatch_size):
    config = (ImpalaConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=1, num_envs_per_env_runner=2,
                           rollout_fragment_length=50)
              .training(train_batch_size=200, minibatch_size=minibatch_size)
              .learners(num_learners=0)
              .rl_module(policy_class=f"{HERE}:StackImpalaPolicy"))
    stack = recorded(tmp_path, monkeypatch, config)
    frames = frames_to_loss(stack, "_run", "learner_actor.py")
    assert len(frames) <= MAX_FRAMES, " <- ".join(frames)


def test_train_repeats_training_step_for_min_time_s_per_iteration():
    """The loop train() runs itself (off the path to the loss) keeps RLlib's behaviour:
    training_step repeats until min_time_s_per_iteration has passed, and every step's
    trained samples count."""
    config = (PPOConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=1, num_envs_per_env_runner=2)
              .training(train_batch_size=100, minibatch_size=100, num_epochs=1)
              .reporting(min_time_s_per_iteration=1.0)
              .learners(num_learners=0))
    with config.build() as algo:
        steps = []
        step = algo.training_step
        algo.training_step = lambda: steps.append(1) or step()
        result = algo.train()
    assert len(steps) >= 2 and result["time_this_iter_s"] >= 1.0, (len(steps), result["time_this_iter_s"])
    assert result["num_env_steps_trained"] == result["timesteps_total"] >= 100 * len(steps)
