"""`rlmesh train` and `rlmesh rollout` as a user runs them: a short PPO CartPole run that
learns, writes its results and a checkpoint, replays it, and stops cleanly on Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

RLMESH = [sys.executable, "-m", "rlmesh.cli.main"]


def _trial_dir(local_dir: Path) -> Path:
    (params,) = local_dir.glob("*/*/params.json")
    return params.parent


def test_train_learns_writes_results_and_rollout_replays(tmp_path):
    local = tmp_path / "results"
    run = subprocess.run(
        [*RLMESH, "train", "-f", "cartpole-ppo.yaml", "--local-dir", str(local),
         "--stop", '{"episode_reward_mean": 150, "timesteps_total": 100000}',
         "--checkpoint-at-end"],
        capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "warning" not in (run.stdout + run.stderr).lower()
    trial = _trial_dir(local)
    results = [json.loads(line) for line in (trial / "result.json").read_text().splitlines()]
    assert results[-1]["episode_reward_mean"] >= 150, results[-1]["episode_reward_mean"]
    assert [r["training_iteration"] for r in results] == list(range(1, len(results) + 1))
    assert json.loads((trial / "params.json").read_text())["env"] == "CartPole-v1"
    header = (trial / "progress.csv").read_text().splitlines()[0].split(",")
    assert "info/learner/default_policy/policy_loss" in header
    assert list(trial.glob("events.out.tfevents.*"))
    (checkpoint,) = trial.glob("checkpoint_*")
    replay = subprocess.run([*RLMESH, "rollout", str(checkpoint), "--episodes", "3"],
                            capture_output=True, text=True, timeout=120)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    returns = [float(line.split()[-1]) for line in replay.stdout.splitlines()
               if line.startswith("episode")]
    assert len(returns) == 3 and min(returns) > 50, replay.stdout


def _signal_when(proc: subprocess.Popen, ready, signum: int) -> str:
    """Send ``signum`` to ``proc`` once ``ready()`` (polled, 120 s at most); its output."""
    try:
        deadline = time.monotonic() + 120
        while not ready():
            assert time.monotonic() < deadline, "not ready within 120 s"
            assert proc.poll() is None, proc.communicate()[0]
            time.sleep(0.2)
        proc.send_signal(signum)
        return proc.communicate(timeout=60)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _block_ctrl_c() -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})


@pytest.mark.parametrize("parent_blocks_signals", [False, True])
def test_ctrl_c_stops_cleanly_with_a_final_checkpoint(tmp_path, parent_blocks_signals):
    """Also when the parent started it with SIGINT blocked (a signal mask survives exec; a
    test runner's thread once left one, and `rlmesh launch` ignored Ctrl-C)."""
    local = tmp_path / "results"
    proc = subprocess.Popen(
        [*RLMESH, "train", "--run", "PPO", "--env", "CartPole-v1", "--local-dir", str(local),
         "--stop", '{"training_iteration": 10000}', "--checkpoint-at-end",
         "--config", '{"train_batch_size": 500, "minibatch_size": 100, "num_epochs": 2}'],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=_block_ctrl_c if parent_blocks_signals else None)

    def two_results() -> bool:
        files = list(local.glob("*/*/result.json"))
        return bool(files) and len(files[0].read_text().splitlines()) >= 2

    out = _signal_when(proc, two_results, signal.SIGINT)
    assert proc.returncode == 130, out
    trial = _trial_dir(local)
    assert list(trial.glob("checkpoint_*/rlmesh_checkpoint.msgpack")), out
    # The conftest fixture checks that none of the run's processes is left.


def test_the_end_of_a_run_loses_nothing_and_leaves_no_process(tmp_path, runs_root):
    """`rlmesh train` ends without the interpreter's teardown (rlmesh.quick_exit): what
    it wrote must all be there when it has exited: the last iteration in result.json,
    progress.csv and TensorBoard, the final checkpoint, stdout's last lines through a pipe;
    and its env runners have exited before it did."""
    from tests.conftest import rlmesh_processes
    from tests.unit.test_results import tb_scalars

    local = tmp_path / "results"
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # as a user's
    run = subprocess.run(
        [*RLMESH, "train", "--run", "PPO", "--env", "CartPole-v1", "--local-dir", str(local),
         "--stop", '{"training_iteration": 2}', "--checkpoint-at-end",
         "--config", '{"train_batch_size": 400, "minibatch_size": 100, "num_epochs": 1}'],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300, env=buffered)
    left = rlmesh_processes(runs_root)
    assert run.returncode == 0, run.stdout + run.stderr
    assert not left, [p.info["cmdline"] for p in left]
    trial = _trial_dir(local)
    last_line = run.stdout.splitlines()[-1]
    assert last_line == f"last checkpoint: {trial / 'checkpoint_000002'}", run.stdout
    rows = [json.loads(line) for line in (trial / "result.json").read_text().splitlines()]
    assert [r["training_iteration"] for r in rows] == [1, 2]
    assert len((trial / "progress.csv").read_text().splitlines()) == 3
    steps = [step for step, _ in tb_scalars(trial)["ray/tune/training_iteration"]]
    assert steps[-1] == rows[-1]["timesteps_total"], steps
    assert (trial / "checkpoint_000002" / "rlmesh_checkpoint.msgpack").exists()


def test_sigterm_ends_a_run_whose_iteration_never_ends(tmp_path):
    """Every episode's first observation is NaN and skipped (`on_nonfinite: skip`), so no
    sample ever completes and the first iteration never ends. SIGTERM used to print
    "stopping after this iteration" and leave the run going until a second signal; now the
    iteration is cut short after --stop-grace seconds and the run ends, its processes gone
    (the conftest fixture checks that none is left)."""
    local = tmp_path / "results"
    proc = subprocess.Popen(
        [*RLMESH, "train", "--run", "PPO", "--env", "tests.integration.hostile_envs:PoisonedCartPole",
         "--local-dir", str(local), "--stop", '{"training_iteration": 3}', "--stop-grace", "2",
         "--config", json.dumps({"on_nonfinite": "skip", "env_config": {"obs": "nan", "at": 1},
                                 "num_env_runners": 1, "train_batch_size": 400,
                                 "minibatch_size": 100})],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def sampling_a_while() -> bool:  # every step skipped, the iteration going on
        if not list(local.glob("*/*/params.json")):
            return False
        time.sleep(3)
        return True

    out = _signal_when(proc, sampling_a_while, signal.SIGTERM)
    assert proc.returncode == 143, out
    assert "did not end within 2 s of SIGTERM; iteration 1 was cut short" in out, out
    assert "Traceback" not in out, out


def test_the_working_directory_is_importable_by_the_rlmesh_command(tmp_path):
    """`rlmesh train --run examples.custom_policy:RandomAlgo` from the repo root (README)
    used to fail with "No module named 'examples'": the console script's sys.path has its
    bin folder, not the working directory, as `python -m` would. Here a user's module in
    the working directory names the env, made in the env-runner process too."""
    (tmp_path / "my_cwd_envs.py").write_text(
        "import gymnasium as gym\n\n"
        "def make(env_config):\n"
        "    return gym.make('CartPole-v1')\n")
    rlmesh = Path(sys.executable).with_name("rlmesh")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run(
        [str(rlmesh), "train", "--run", "PPO", "--env", "my_cwd_envs:make",
         "--local-dir", str(tmp_path / "results"), "--stop", '{"training_iteration": 1}',
         "--config", '{"num_env_runners": 1, "train_batch_size": 200, "minibatch_size": 50}'],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "stopped: training_iteration = 1 >= 1" in run.stdout, run.stdout
