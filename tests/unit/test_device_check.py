"""The device check (RLMESH_CHECK_DEVICES): on a machine without a GPU, a tensor that a CPU
learner's update makes without ``device=`` raises, naming the file and line, as it would
fail beside a CUDA model. Here on the statistics IMPALA once reported (a constant made with
``torch.tensor(coeff)``), with the check on and off; and the check changes nothing it lets
through (torch's own calls, an optimizer step)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmesh.algorithms.ppo import PPOConfig, PPOTorchPolicy
from rlmesh.policy.device_check import ENV_VAR, DeviceCheckError, learner_scope
from rlmesh.policy.learner_stats import mean_stats

CPU = torch.device("cpu")


def stats_of_a_step(device: torch.device, coeff: float, as_tensor: bool) -> dict:
    loss = torch.ones(4, device=device).sum()
    return {"loss": loss.detach(), "entropy_coeff": torch.tensor(coeff) if as_tensor else coeff}


def test_a_constant_made_without_a_device_fails_under_the_check_naming_the_line(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "1")
    with pytest.raises(DeviceCheckError, match=r"torch.tensor\(...\) without device= at "
                                               r".*test_device_check.py:\d+"):
        with learner_scope(CPU):
            mean_stats([stats_of_a_step(CPU, 0.01, as_tensor=True)])


def test_floats_and_tensors_on_the_learners_device_pass_under_the_check(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "1")
    with learner_scope(CPU):
        means = mean_stats([stats_of_a_step(CPU, 0.01, as_tensor=False)] * 2)
        made_right = torch.zeros(3, device=CPU)
    assert means == pytest.approx({"loss": 4.0, "entropy_coeff": 0.01})
    assert made_right.device == CPU


def test_without_the_check_the_cpu_hides_the_bug(monkeypatch):
    # Why the check exists: on the CPU alone, the buggy statistics go through.
    monkeypatch.delenv(ENV_VAR, raising=False)
    with learner_scope(CPU):
        means = mean_stats([stats_of_a_step(CPU, 0.01, as_tensor=True)])
    assert means["entropy_coeff"] == pytest.approx(0.01)


def test_a_checked_update_computes_what_an_unchecked_one_does(monkeypatch):
    """torch's own factories (inside torch.optim, nn.functional) pass, and run on the CPU as
    usual: the weights after a checked update equal those after an unchecked one."""
    obs, act = gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2)
    rng = np.random.default_rng(0)
    batch = {"obs": rng.normal(size=(64, 4)).astype(np.float32),
             "actions": rng.integers(0, 2, 64), "action_logp": np.full(64, -0.69, np.float32),
             "action_dist_inputs": np.zeros((64, 2), np.float32),
             "advantages": rng.normal(size=64).astype(np.float32),
             "value_targets": rng.normal(size=64).astype(np.float32)}
    weights = []
    for check in ("1", "0"):
        monkeypatch.setenv(ENV_VAR, check)
        config = PPOConfig.from_dict({"seed": 0, "num_epochs": 2, "minibatch_size": 32})
        torch.manual_seed(0)
        policy = PPOTorchPolicy(obs, act, config).for_learning()
        before = {k: v.clone() for k, v in policy.model.state_dict().items()}
        with learner_scope(CPU):
            policy.learn_on_batch(batch)
        after = policy.model.state_dict()
        assert any(not torch.equal(before[k], after[k]) for k in after)  # it did step
        weights.append(after)
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def test_a_learner_checks_its_first_updates_then_every_twentieth(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "1")

    def checked(update: int) -> bool:
        with learner_scope(CPU, update):
            try:
                torch.empty(1)
            except DeviceCheckError:
                return True
        return False

    assert [u for u in range(61) if checked(u)] == [0, 1, 2, 20, 40, 60]
    monkeypatch.setenv(ENV_VAR, "0")
    assert not checked(0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_gpu_the_same_bug_fails_without_the_check(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    cuda = torch.device("cuda")
    with pytest.raises(RuntimeError, match="same device"):
        with learner_scope(cuda):
            mean_stats([stats_of_a_step(cuda, 0.01, as_tensor=True)])
