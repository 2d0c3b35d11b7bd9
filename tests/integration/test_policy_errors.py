"""A user's policy mistakes, as the user meets them: a policy class that breaks the contract,
a loss asking for a column the batch lacks (on a learner in its own process), a lambda sent
to the runners, an unknown --run path. Each is one line naming the problem, from Python and
from `rlmesh train` (exit 2, no traceback), and no process is left behind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from examples.custom_policy import RandomAlgo
from rlmesh.algorithms import PPOConfig
from rlmesh.policy import PolicyError
from rlmesh.runtime import RemoteError

REPO = Path(__file__).resolve().parents[2]
TESTS = "tests.integration.policies_for_tests"
# No process of a failed run may outlive it (tests/conftest.py).
pytestmark = [pytest.mark.timeout(90), pytest.mark.usefixtures("no_children_left")]


def rlmesh_train(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlmesh.cli.main", "train", *args],
                          capture_output=True, text=True, timeout=90, cwd=REPO)


def assert_one_line_error(run: subprocess.CompletedProcess, *words: str) -> str:
    """Exit 2 and one error line on stderr that holds every word; no traceback."""
    assert run.returncode == 2, run.stdout + run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("rlmesh train: error: "), run.stderr
    assert "Traceback" not in run.stdout + run.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("cls, missing", [
    ("ActsButCannotLearn", "implements neither learn_on_batch nor update"),
    ("NotAPolicy", "is not a subclass of rlmesh.policy.Policy"),
])
def test_a_policy_class_that_breaks_the_contract_is_named_before_anything_starts(
        tmp_path, cls, missing):
    config = PPOConfig().environment("CartPole-v1").rl_module(policy_class=f"{TESTS}:{cls}")
    with pytest.raises(PolicyError, match=missing):
        config.build()
    run = rlmesh_train("--run", "PPO", "--env", "CartPole-v1", "--local-dir", str(tmp_path),
                       "--config", f'{{"policy_class": "{TESTS}:{cls}"}}')
    assert_one_line_error(run, "PolicyError", cls, missing)


def test_a_policy_class_path_that_imports_nothing_is_a_policy_error():
    with pytest.raises(PolicyError, match="No module named 'nosuch'"):
        RandomAlgo({"env": "CartPole-v1", "policy_class": "nosuch.module:MyPolicy"})


def test_a_missing_column_names_the_columns_the_batch_has(tmp_path):
    # The learner is a process of its own: the error comes back as a RemoteError.
    from tests.integration.policies_for_tests import MissingColumnAlgo

    with MissingColumnAlgo({"env": "CartPole-v1"}) as algo:
        with pytest.raises(RemoteError) as err:
            algo.train()
    assert err.value.etype == "MissingColumn"
    assert "no column 'returns'" in err.value.remote_msg
    assert "'actions'" in err.value.remote_msg and "'rewards'" in err.value.remote_msg

    run = rlmesh_train("--run", f"{TESTS}:MissingColumnAlgo", "--env", "CartPole-v1",
                       "--local-dir", str(tmp_path), "--stop", '{"training_iteration": 3}')
    line = assert_one_line_error(run, "MissingColumn in learner-0", "no column 'returns'",
                                 "'rewards'", "postprocess_trajectory")
    assert "remote traceback" not in line


def test_a_lambda_whose_result_cannot_come_back_is_one_line_and_the_runner_serves_on():
    with RandomAlgo({"env": "CartPole-v1", "num_env_runners": 1}) as algo:
        for call in (algo.env_runners.foreach_env_runner, algo.env_runners.foreach_env):
            with pytest.raises(Exception) as err:
                call(lambda x: x)  # the runner, or the env: not plain data
            message = str(err.value)
            assert "\n" not in message and "cannot encode a" in message and "send plain data" in message
            assert call(lambda x: 7) == [7] * len(call(lambda x: 0))


@pytest.mark.parametrize("run_path, words", [
    ("nosuch.mod:X", ("--run 'nosuch.mod:X'", "No module named 'nosuch'")),
    ("examples.custom_policy:NoSuchAlgo", ("has no attribute 'NoSuchAlgo'",)),
    ("examples.custom_policy:MyPolicy", ("neither an Algorithm", "nor an AlgorithmConfig")),
])
def test_an_unknown_run_path_is_one_line_and_exit_2(tmp_path, run_path, words):
    run = rlmesh_train("--run", run_path, "--env", "CartPole-v1", "--local-dir", str(tmp_path))
    assert_one_line_error(run, *words)
