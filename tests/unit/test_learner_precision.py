"""The learner's speed settings: bf16 autocast (``_torch_autocast``) and a compiled loss
(``torch_compile_learner``) change how the loss is computed, not what the policy is: the
weights stay float32, the statistics come back as floats, and the update still learns."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmesh.algorithms.ppo import PPOConfig, PPOTorchPolicy
from rlmesh.config.base import ConfigError

OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
ACT = gym.spaces.Discrete(2)


def samples(n: int = 256) -> dict[str, np.ndarray]:
    """A batch where action 1 has advantage +1 and action 0 has -1: any working update
    raises the probability of action 1."""
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 2, n)
    return {"obs": rng.normal(size=(n, 4)).astype(np.float32), "actions": actions,
            "action_logp": np.full(n, np.log(0.5), np.float32),
            "action_dist_inputs": np.zeros((n, 2), np.float32),
            "advantages": np.where(actions == 1, 1.0, -1.0).astype(np.float32),
            "value_targets": np.zeros(n, np.float32)}


def prob_of_action_1(policy: PPOTorchPolicy, obs: np.ndarray) -> float:
    with torch.no_grad():
        logits = policy.model(torch.as_tensor(obs))[0]
    return float(torch.softmax(logits, -1)[:, 1].mean())


@pytest.mark.parametrize("settings", [{"_torch_autocast": "bf16"},
                                      {"torch_compile_learner": True,
                                       "torch_compile_learner_dynamo_backend": "eager"}],
                         ids=["bf16", "compiled"])
def test_the_update_learns_with_float32_weights_and_float_stats(settings):
    cfg = PPOConfig.from_dict({"lr": 1e-2, "num_epochs": 3, "minibatch_size": 64,
                               "model": {"fcnet_hiddens": [32]}, **settings})
    policy = PPOTorchPolicy(OBS, ACT, cfg).for_learning()
    batch = samples()
    before = prob_of_action_1(policy, batch["obs"])
    stats = policy.learn_on_batch(batch)
    assert prob_of_action_1(policy, batch["obs"]) > before + 0.05
    assert all(isinstance(v, (int, float)) and np.isfinite(v) for v in stats.values()), stats
    assert all(p.dtype == torch.float32 for p in policy.model.parameters())
    assert all(p.grad is None or p.grad.dtype == torch.float32 for p in policy.model.parameters())


def test_bf16_changes_the_loss_by_rounding_only():
    batch = {k: torch.as_tensor(v) for k, v in samples().items()}
    plain = PPOTorchPolicy(OBS, ACT, PPOConfig.from_dict({"seed": 0}))
    mixed = PPOTorchPolicy(OBS, ACT, PPOConfig.from_dict({"seed": 0, "_torch_autocast": "bf16"}))
    mixed.model.load_state_dict(plain.model.state_dict())
    exact, _ = plain.learner_loss(batch)
    rounded, _ = mixed.learner_loss(batch)
    assert float(rounded) == pytest.approx(float(exact), rel=0.05, abs=0.02)


def test_an_unknown_precision_is_one_line_naming_the_choices():
    with pytest.raises(ConfigError, match="_torch_autocast: expected 'bf16' or None, got 'fp16'"):
        PPOConfig.from_dict({"_torch_autocast": "fp16"}).validate()
