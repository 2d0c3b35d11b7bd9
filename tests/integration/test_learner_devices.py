"""Every registered algorithm's learner, a few iterations on each device this machine has:
the CPU under the device check (RLMESH_CHECK_DEVICES, which fails on a tensor made without
``device=`` as a GPU would), and CUDA where present. The cases are the GPU suite's
(``tests/gpu/cases.py``, ``make gpu-check``), so CI runs them on the CPU side."""

from __future__ import annotations

import pytest
import torch

from rlmesh.policy.device_check import ENV_VAR
from tests.gpu.cases import ALGORITHM_SETTINGS, CASES

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def device_check(monkeypatch, request):
    """The CPU runs checked (learner processes inherit the variable); CUDA runs as it is."""
    if request.param == "cpu":
        monkeypatch.setenv(ENV_VAR, "1")
    return request.param == "cpu"


@pytest.mark.parametrize("device_check", DEVICES, indirect=True)
@pytest.mark.parametrize("case", [*ALGORITHM_SETTINGS, "offline BC+MARWIL", "LSTM PPO+IMPALA",
                                  "conv 84x84x4 PPO", "IMPALA 2 learners x 0.5 GPU"])
def test_learner_trains_on_the_device(case, device_check):
    CASES[case](device_check)
