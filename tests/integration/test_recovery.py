"""Faults against running jobs (issue 15, recovery): a killed learner, damaged and stale
checkpoints, a full disk and a read-only results folder, a misspelled stop key, an env that
hangs or always raises, restarts under backoff, junk on a stream. Each ends in one clear
line (or goes on, counted), never a raw traceback or a silent stall."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

RLMESH = [sys.executable, "-m", "rlmesh.cli.main"]
PPO_FAST = {"train_batch_size": 200, "minibatch_size": 100, "num_epochs": 1,
            "model": {"fcnet_hiddens": [16]}}
pytestmark = pytest.mark.timeout(120)


class Cli:
    """`rlmesh train ...` in a session of its own: read its lines as they come, and kill
    whatever is left of it at the end (its actors follow through their lifelines)."""

    def __init__(self, *argv: str, prefix: tuple[str, ...] = ()) -> None:
        self.proc = subprocess.Popen([*prefix, *RLMESH, "train", *argv], text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.lines: list[str] = []

    def wait_for(self, text: str, timeout: float) -> str:
        """Lines until one holds ``text`` (AssertionError with the output if none does)."""
        deadline = time.monotonic() + timeout
        os.set_blocking(self.proc.stdout.fileno(), False)
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line:
                self.lines.append(line)
                if text in line:
                    return line
            elif self.proc.poll() is not None:
                break
            else:
                time.sleep(0.05)
        raise AssertionError(f"no line with {text!r}:\n{self.output}")

    def finish(self, timeout: float = 60) -> tuple[int, str]:
        try:
            rest, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            rest, _ = self.proc.communicate()
            raise AssertionError(f"still running after {timeout} s:\n{self.output}{rest}")
        self.lines.append(rest)
        return self.proc.returncode, self.output

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


@pytest.fixture
def cli():
    started: list[Cli] = []

    def start(*argv: str, prefix: tuple[str, ...] = ()) -> Cli:
        started.append(Cli(*argv, prefix=prefix))
        return started[-1]

    yield start
    for c in started:
        c.kill()


def train_args(local: Path, *, env: str = "CartPole-v1", runners: int = 1, stop: int = 2,
               **config) -> list[str]:
    return ["--run", "PPO", "--env", env, "--local-dir", str(local),
            "--stop", json.dumps({"training_iteration": stop}),
            "--config", json.dumps({**PPO_FAST, "num_env_runners": runners, **config})]


def assert_one_error_line(output: str, *parts: str) -> str:
    assert "Traceback" not in output, output
    (line,) = [s for s in output.splitlines() if s.startswith("rlmesh train: error:")]
    for part in parts:
        assert part in line, output
    return line


def dead_pid() -> int:
    """The id of a process that has just ended (nothing runs under it now)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


# --- the learner ---

def test_a_killed_ppo_learner_ends_the_run_naming_the_checkpoint(tmp_path, cli):
    run = cli(*train_args(tmp_path, stop=10_000, num_learners=1), "--checkpoint-freq", "1")
    run.wait_for("checkpoint: ", timeout=60)
    (learner,) = [p for p in psutil.Process(run.proc.pid).children(recursive=True)
                  if any(".learner-0.spec" in a for a in p.cmdline())]
    learner.kill()
    code, out = run.finish()
    assert code == 1, out
    assert_one_error_line(out, "the learner failed", "learner-0 died")
    assert "resume with `rlmesh train ... --resume`" in out and "checkpoint_0000" in out, out
    # A SIGKILLed learner wrote no traceback: no line says it did, nor points to an empty log
    # (issue 48: "its traceback: .../logs/learner-0.log", an empty file).
    assert "its traceback: " not in out, out
    (log,) = [s.split("the run's log: ", 1)[1] for s in out.splitlines() if "the run's log: " in s]
    assert "learner-0 died" in Path(log).read_text()


def test_a_learner_whose_update_raises_is_one_line_and_a_log_with_the_traceback(tmp_path, cli):
    code, out = cli("--run", "tests.integration.policies_for_tests:BuggyLossAlgo",
                    "--env", "CartPole-v1", "--local-dir", str(tmp_path),
                    "--stop", json.dumps({"training_iteration": 3})).finish()
    assert code == 1, out
    line = assert_one_error_line(out, "the learner failed", "ValueError in learner-0",
                                 "a bug in the loss")
    assert out.count("a bug in the loss") == 1, out  # the cause once, not once per layer
    (log,) = [s.split("its traceback: ", 1)[1] for s in out.splitlines() if "its traceback: " in s]
    text = Path(log).read_text()
    assert "Traceback (most recent call last)" in text and "loss_with_a_bug" in text, text
    assert "no checkpoint was saved" in out, line


# --- checkpoints ---

def test_resume_skips_a_truncated_newest_checkpoint_and_removes_stale_saves(tmp_path, cli):
    code, out = cli(*train_args(tmp_path, stop=2), "--checkpoint-freq", "1").finish()
    assert code == 0, out
    (trial,) = tmp_path.glob("*/*/params.json")
    trial = trial.parent
    newest = trial / "checkpoint_000002"
    state = (newest / "learner.pt").read_bytes()
    (newest / "learner.pt").write_bytes(state[: len(state) // 2])  # a save cut short
    dead, live = dead_pid(), os.getpid()
    stale = [trial / f".checkpoint_000003.tmp-{dead}", trial / f".checkpoint_000001.old-{dead}"]
    in_progress = trial / f".checkpoint_000009.tmp-{live}"  # a live process's save: kept
    for d in (*stale, in_progress):
        d.mkdir()
        (d / "learner.pt").write_bytes(b"\0" * 1000)

    code, out = cli(*train_args(tmp_path, stop=3), "--checkpoint-freq", "1", "--resume",
                    "--experiment-name", trial.parent.name).finish()
    assert code == 0, out
    assert f"skipping {newest}: " in out and "is damaged" in out, out
    assert f"resuming from {trial / 'checkpoint_000001'}" in out, out
    assert "Traceback" not in out, out
    results = [json.loads(s) for s in (trial / "result.json").read_text().splitlines()]
    # The rows past the checkpoint resumed from (iteration 2, redone) are replaced, not
    # repeated (issue 48: result.json held the redone iteration twice), in both files.
    assert [r["training_iteration"] for r in results] == [1, 2, 3]
    with open(trial / "progress.csv", newline="") as f:
        assert [int(r["training_iteration"]) for r in csv.DictReader(f)] == [1, 2, 3]
    assert not any(d.exists() for d in stale) and in_progress.exists()


def test_a_damaged_checkpoint_is_one_line_in_rollout_and_resume(tmp_path, cli):
    code, out = cli(*train_args(tmp_path, stop=1), "--checkpoint-at-end").finish()
    assert code == 0, out
    (checkpoint,) = tmp_path.glob("*/*/checkpoint_000001")
    meta = checkpoint / "rlmesh_checkpoint.msgpack"
    meta.write_bytes(meta.read_bytes()[:40])
    rollout = subprocess.run([*RLMESH, "rollout", str(checkpoint)], capture_output=True,
                             text=True, timeout=60)
    assert rollout.returncode == 2 and "Traceback" not in rollout.stderr, rollout.stderr
    assert f"{checkpoint} is damaged" in rollout.stderr
    code, out = cli(*train_args(tmp_path, stop=2), "--resume",
                    "--experiment-name", checkpoint.parent.parent.name).finish()
    assert code == 2, out
    assert_one_error_line(out, "--resume: none of the 1 checkpoints")


def test_a_checkpoint_of_another_model_is_one_checkpoint_error(tmp_path):
    from rlmesh.driver.checkpoints import CheckpointError
    from rlmesh.algorithms.ppo import PPOConfig

    def build(hiddens):
        return (PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=0)
                .training(train_batch_size=100, minibatch_size=50, num_epochs=1,
                          model={"fcnet_hiddens": hiddens}).build())

    with build([16]) as algo:
        algo.train()
        path = algo.save(tmp_path / "small")
    with build([32]) as algo:
        with pytest.raises(CheckpointError, match="does not fit this PPO run") as err:
            algo.restore(path)
    assert len(str(err.value).splitlines()) == 1 and "size mismatch" in str(err.value)


# --- the results folder ---

def userns_tmpfs(mountpoint: Path, options: str) -> tuple[str, ...]:
    """A prefix that runs a command with a small tmpfs at ``mountpoint``, in a mount
    namespace of its own (so it needs no root and vanishes with the process)."""
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    if probe.returncode != 0:  # under CI a broken environment must fail, not hide
        why = f"no user namespaces here: {probe.stderr.decode().strip()}"
        pytest.fail(why) if os.environ.get("CI") else pytest.skip(why)
    mountpoint.mkdir()
    return ("unshare", "-rm", "sh", "-c",
            f'mount -t tmpfs -o {options} tmpfs "$0" && exec "$@"', str(mountpoint))


def test_a_read_only_results_folder_is_one_line(tmp_path, cli):
    local = tmp_path / "ro"
    prefix = userns_tmpfs(local, "ro,size=1m")
    code, out = cli(*train_args(local), prefix=prefix).finish()
    assert code == 1, out
    assert_one_error_line(out, f"cannot write {local}", "Read-only file system",
                          "--local-dir")


def test_a_full_disk_is_one_line(tmp_path, cli):
    local = tmp_path / "small"
    prefix = userns_tmpfs(local, "size=96k")
    code, out = cli(*train_args(local, stop=10_000), "--checkpoint-freq", "1",
                    prefix=prefix).finish()
    assert code == 1, out
    assert_one_error_line(out, "cannot write", "No space left on device", "free space")


# --- env failures ---

def test_a_blocked_env_step_is_named_within_seconds(tmp_path, cli):
    env = "tests.integration.faulty_envs:make_hang"
    run = cli(*train_args(tmp_path, env=env, runners=2, stop=10_000, sample_timeout_s=600))
    line = run.wait_for("env_runner-1 blocked", timeout=60)  # the call would wait 600 s
    assert "env 0 step() of env runner 1" in line, run.output


def test_an_env_that_always_raises_ends_the_run_with_its_first_traceback(tmp_path, cli):
    env = "tests.integration.faulty_envs:make_raise"
    code, out = cli(*train_args(tmp_path, env=env)).finish()
    assert code == 1, out
    (line,) = [s for s in out.splitlines() if s.startswith("rlmesh train: error:")]
    assert "env 0 raised in step() 5 times in a row" in line and "in env_runner-1" in line
    # Then the env's own traceback, marked off, and nothing of rlmesh's.
    assert out.count("Traceback") == 1 and "  | Traceback" in out, out
    assert "  | ConnectionError: simulator at 10.0.0.7 refused the step" in out, out


def test_env_errors_now_and_then_are_counted_with_the_first_traceback_shown_once(caplog):
    from rlmesh.algorithms.ppo import PPOConfig

    config = (PPOConfig().environment("tests.integration.faulty_envs:make_flaky")
              .env_runners(num_env_runners=1, num_envs_per_env_runner=2)
              .training(train_batch_size=200, minibatch_size=100, num_epochs=1))
    with caplog.at_level("WARNING"), config.build() as algo:
        counts = [algo.train()["num_env_errors"] for _ in range(3)]
    assert 0 < counts[0] < counts[1] < counts[2], counts  # each recreated env, counted
    shown = [r.getMessage() for r in caplog.records if "raised in step()" in r.getMessage()]
    assert len(shown) == 1, shown
    assert shown[0].startswith("env_runner-1: env ") and "Traceback" in shown[0]
    assert "ConnectionError: simulator dropped the connection" in shown[0]


# --- restarts ---

def test_ppo_samples_on_with_the_healthy_runners_while_one_restarts():
    from rlmesh.algorithms.ppo import PPOConfig

    config = (PPOConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=2, rollout_fragment_length=25)
              .training(train_batch_size=200, minibatch_size=100, num_epochs=1))
    with config.build() as algo:
        algo.train()
        os.kill(algo.env_runners.foreach_env_runner("pid")[0], signal.SIGKILL)
        result = algo.train()
        # The other runner filled the iteration; the rounds the dead one missed are counted.
        assert result["num_env_steps_sampled_this_iter"] >= 200
        assert result["num_fragments_missed_this_iter"] >= 1
        deadline = time.monotonic() + 60
        while algo.train()["num_healthy_env_runners"] < 2:
            assert time.monotonic() < deadline, "the killed runner never came back"
        assert algo.train()["num_fragments_missed_this_iter"] == 0


def test_restart_backoff_starts_again_after_a_healthy_run():
    import asyncio

    from rlmesh.runtime import Job, RestartPolicy

    from .runtime_actors import Worker

    async def scenario() -> list[str]:
        policy = RestartPolicy(max_restarts=10, backoff_s=0.2, healthy_after_s=1.0)
        async with Job("ipc") as job:
            handle = await job.spawn(Worker, name="w", restart=policy)
            for _ in range(4):
                os.kill(await handle.call("pid"), signal.SIGKILL)
                restarted = len([e for e in job.supervisor.events if e.kind == "restarted"])
                while len([e for e in job.supervisor.events if e.kind == "restarted"]) == restarted:
                    await asyncio.sleep(0.05)
                await asyncio.sleep(1.5)  # healthy for longer than healthy_after_s
            return [e.detail for e in job.supervisor.events if e.kind == "restarted"]

    details = asyncio.run(scenario())
    # Without the reset: 0.2, 0.4, 0.8, 1.6 s.
    assert [d.split("after a backoff of ")[-1] for d in details] == ["0.2 s"] * 4, details


# --- loss counters ---

def test_junk_on_an_aggregator_stream_and_restarts_are_counted_and_never_go_down():
    from rlmesh.algorithms.impala import ImpalaConfig
    from rlmesh.runtime import RemoteError

    config = (ImpalaConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=2, num_envs_per_env_runner=2,
                           rollout_fragment_length=25)
              .training(train_batch_size=100, model={"fcnet_hiddens": [16]})
              .learners(num_aggregation_workers=1)
              .reporting(min_time_s_per_reporting=0.3))
    junk = [{"env_steps": 50, "policy_version": 0, "obs": np.zeros((25, 2, 3), np.float32),
             "mask": np.ones((25, 2), bool)},  # obs of the wrong size: would spoil a batch
            {"env_steps": "many", "policy_version": 0}]
    with config.build() as algo:
        lost = [algo.train()["num_fragments_lost"]]

        async def send_junk() -> int:
            sender = algo.mesh.aggregators[0].stream("add_fragment", 4)
            refused = 0

            async def until_done(step) -> None:
                nonlocal refused
                while True:  # an earlier item's refusal is raised before the next goes
                    try:
                        return await step()
                    except RemoteError as exc:
                        assert "not a fragment" in str(exc)
                        refused += 1

            for item in junk * 3:
                await until_done(lambda: sender.send(item))
            await until_done(sender.flush)
            sender.close()
            return refused

        assert algo.mesh.run(send_junk()) >= 1  # the sender keeps only the latest refusal
        lost.append(algo.train()["num_fragments_lost"])
        assert lost[-1] >= len(junk) * 3, lost  # every refused one
        aggregator_pid = algo.mesh.run(algo.mesh.aggregators[0].call("pid"))
        os.kill(aggregator_pid, signal.SIGKILL)  # the runners' in-flight fragments are lost
        deadline = time.monotonic() + 60
        while (result := algo.train())["num_aggregator_restarts"] < 1 or len(lost) < 8:
            lost.append(result["num_fragments_lost"])
            assert time.monotonic() < deadline, "the aggregator never came back"
        # The refused junk, and what the runners had in flight to the dead aggregator.
        assert lost[-1] > len(junk) * 3, lost
        os.kill(algo.env_runners.foreach_env_runner("pid")[0], signal.SIGKILL)
        for _ in range(6):
            lost.append(algo.train()["num_fragments_lost"])
    assert lost == sorted(lost), lost  # a restarted runner's count starts at 0: no dip


# --- GPUs that cannot be had ---

@pytest.mark.parametrize("learners", [0, 1])
def test_a_learner_out_of_memory_is_one_line_naming_the_batch_sizes(tmp_path, cli, learners):
    code, out = cli("--run", "tests.integration.policies_for_tests:OutOfMemoryAlgo",
                    "--env", "CartPole-v1", "--local-dir", str(tmp_path),
                    "--stop", json.dumps({"training_iteration": 2}),
                    "--config", json.dumps({"num_learners": learners, "train_batch_size": 200,
                                            "minibatch_size": 100})).finish()
    assert code != 0, out
    assert_one_error_line(out, "ran out of memory in policy 'default_policy'",
                          "train_batch_size=200", "minibatch_size=100", "lower minibatch_size")


def test_learners_asking_for_more_gpus_than_exist_start_nothing(tmp_path, cli):
    import torch

    run = cli(*train_args(tmp_path, num_learners=64, num_gpus_per_learner=1))
    code, out = run.finish()
    assert code != 0, out
    words = "needs 64 GPUs" if torch.cuda.is_available() else "no CUDA device is visible here"
    assert_one_error_line(out, "num_gpus_per_learner=1", words)
    assert not list(tmp_path.iterdir()), "no trial folder: nothing started"
