"""Bad input a careless user gives, through the real CLI: each case ends in one line saying
what happened and what to do, exit code 2, and no traceback (issue 36, point 8). Rollout
cases load a real checkpoint edited the way a damaged or mismatched one would be."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import msgpack
import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
RLMESH = [sys.executable, "-m", "rlmesh.cli.main"]
ENVS = "tests.integration.user_error_envs"
SMALL = '"num_env_runners": 1, "train_batch_size": 200, "minibatch_size": 64'
pytestmark = pytest.mark.timeout(600)


def _cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([*RLMESH, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO, env=env)


def _train(env: str, config: str, local: Path) -> list[str]:
    return ["train", "--run", "PPO", "--env", env, "--config", f"{{{config}}}",
            "--stop", '{"training_iteration": 1}', "--local-dir", str(local)]


# (case, env, config, words the error line must hold)
TRAIN_CASES = [
    ("wrong observation shape", f"{ENVS}:make_wrong_shape", SMALL,
     ["ObservationError", "env_runner-1", "(3,)", "observation_space"]),
    ("string observation", f"{ENVS}:make_string_obs", SMALL,
     ["ObservationError", "env_runner-1", "<U7", "observation_space"]),
    ("fcnet_hiddens as a string", "CartPole-v1", SMALL + ', "model": {"fcnet_hiddens": "64"}',
     ["fcnet_hiddens", "list of layer sizes", "'64'"]),
    ("typo'd model key", "CartPole-v1", SMALL + ', "model": {"fcnet_hidden": [64]}',
     ["fcnet_hidden", "did you mean 'fcnet_hiddens'"]),
    ("env package not installed", "nosuchsim_pkg_36:NoSuchSim-v0", SMALL,
     ["needs the module 'nosuchsim_pkg_36'", "not installed", "pip install"]),
    ("train_batch_size past memory", "CartPole-v1",
     '"num_env_runners": 1, "train_batch_size": 1000000000000',
     ["train_batch_size", "memory", "lower train_batch_size"]),
    ("num_gpus without CUDA", "CartPole-v1", SMALL + ', "num_gpus": 1',
     ["no CUDA device", "num_gpus"]),
    ("num_gpus_per_learner without CUDA", "CartPole-v1", SMALL + ', "num_gpus_per_learner": 1',
     ["no CUDA device", "num_gpus_per_learner"]),
    ("hung env at sample_timeout_s", f"{ENVS}:make_hang", SMALL + ', "sample_timeout_s": 3',
     ["SampleTimeout", "env_runner-1", "make_hang", "sample_timeout_s"]),
]


def _one_line_error(run: subprocess.CompletedProcess, command: str) -> str:
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith(f"rlmesh {command}: error")]
    assert len(errors) == 1, run.stderr
    return errors[0]


@pytest.mark.parametrize("case,env,config,words", TRAIN_CASES, ids=[c[0] for c in TRAIN_CASES])
def test_train_says_what_happened_in_one_line(tmp_path, case, env, config, words):
    if "CUDA" in words[0] and torch.cuda.is_available():
        pytest.skip("a CUDA device is visible here")
    line = _one_line_error(_cli(*_train(env, config, tmp_path / "results")), "train")
    for word in words:
        assert word in line, line


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    local = tmp_path_factory.mktemp("user_errors") / "results"
    run = _cli(*_train("CartPole-v1", SMALL, local), "--checkpoint-freq", "1")
    assert run.returncode == 0, run.stderr
    (found,) = local.glob("*/*/checkpoint_000001")
    return found


def _no_model(state, meta):
    del state["policies"]["default_policy"]["model"]


def _no_policies(state, meta):
    del state["policies"]


def _wrong_shapes(state, meta):
    model = state["policies"]["default_policy"]["model"]
    model[next(iter(model))] = torch.zeros(3, 3)


def _nan_weights(state, meta):
    model = state["policies"]["default_policy"]["model"]
    model[next(iter(model))][0, 0] = float("nan")


def _other_algorithm(state, meta):
    meta["algorithm"] = "DQN"


# (case, edit of (learner state, metadata), extra rollout flags, words the error line must hold)
ROLLOUT_CASES = [
    ("state without model", _no_model, [], ["lacks 'model'", "does not fit"]),
    ("state without policies", _no_policies, [], ["damaged", "no policy states"]),
    ("weights of other shapes", _wrong_shapes, [], ["does not fit", "size mismatch"]),
    ("NaN weights", _nan_weights, [], ["non-finite weights", "nan", "earlier checkpoint"]),
    ("another algorithm's", _other_algorithm, [], ["not a valid DQN config"]),
    ("another env", None, ["--env", "Acrobot-v1"], ["Acrobot-v1", "does not take", "(6,)"]),
]


@pytest.mark.parametrize("case,edit,flags,words", ROLLOUT_CASES, ids=[c[0] for c in ROLLOUT_CASES])
def test_rollout_of_a_checkpoint_that_does_not_fit_says_so_in_one_line(
        tmp_path, checkpoint, case, edit, flags, words):
    edited = tmp_path / "checkpoint_000001"
    shutil.copytree(checkpoint, edited)
    if edit is not None:
        state = torch.load(edited / "learner.pt", weights_only=True)
        meta = msgpack.unpackb((edited / "rlmesh_checkpoint.msgpack").read_bytes())
        edit(state, meta)
        torch.save(state, edited / "learner.pt")
        (edited / "rlmesh_checkpoint.msgpack").write_bytes(msgpack.packb(meta))
    line = _one_line_error(_cli("rollout", str(edited), "--steps", "20", *flags), "rollout")
    for word in words:
        assert word in line, line


def test_ppo_with_two_learners_and_one_env_trains(tmp_path):
    """Point 7: one env runner with one env gives a batch one column wide; each of two
    data-parallel learners must still get data (it crashed: 'cannot reshape tensor of 0
    elements')."""
    run = _cli("train", "--run", "PPO", "--env", "CartPole-v1", "--config",
               '{"num_learners": 2, "num_env_runners": 1}', "--stop",
               '{"training_iteration": 2}', "--local-dir", str(tmp_path / "results"))
    assert run.returncode == 0, run.stderr
    assert "stopped: training_iteration = 2" in run.stdout, run.stdout
