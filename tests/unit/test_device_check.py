"""The device check (RLMESH_CHECK_DEVICES): on a machine without a GPU, a CPU learner's work
runs with torch's default device 'meta', so that a tensor made without ``device=`` fails as
it would beside a CUDA model. Here on the statistics IMPALA once reported (a constant made
with ``torch.tensor(coeff)``), with the check on and off."""

from __future__ import annotations

import pytest
import torch

from rlmesh.policy.device_check import ENV_VAR, learner_scope
from rlmesh.policy.learner_stats import mean_stats

CPU = torch.device("cpu")


def stats_of_a_step(device: torch.device, coeff: float, as_tensor: bool) -> dict:
    loss = torch.ones(4, device=device).sum()
    return {"loss": loss.detach(), "entropy_coeff": torch.tensor(coeff) if as_tensor else coeff}


def test_a_constant_made_without_a_device_fails_under_the_check(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "1")
    with pytest.raises(RuntimeError, match=f"{ENV_VAR} is set.*device=self.device"):
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


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_gpu_the_same_bug_fails_without_the_check(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    cuda = torch.device("cuda")
    with pytest.raises(RuntimeError, match="same device"):
        with learner_scope(cuda):
            mean_stats([stats_of_a_step(cuda, 0.01, as_tensor=True)])


def test_a_learner_checks_its_first_updates_then_every_twentieth(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "1")

    def checked(update: int) -> bool:
        with learner_scope(CPU, update):
            return torch.empty(1).device.type == "meta"

    assert [u for u in range(61) if checked(u)] == [0, 1, 2, 20, 40, 60]
    monkeypatch.setenv(ENV_VAR, "0")
    assert not checked(0)
