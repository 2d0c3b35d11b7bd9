"""Supervision beyond restarts (issue 48): an env that keeps crashing its runner ends the run in
one line naming the env and the signal, its crash dump in the runner's log and not on the
console; a runner over max_runner_memory_mb is stopped, naming its memory; a learner update far
longer than its median is reported, naming the learner and `rlmesh stack`."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from rlmesh.algorithms.ppo import PPOConfig
from rlmesh.driver.runner_faults import EnvCrashed

from .test_recovery import assert_one_error_line, cli, train_args  # noqa: F401 (cli: a fixture)

pytestmark = pytest.mark.timeout(120)


def test_an_env_that_keeps_crashing_its_runner_ends_the_run_in_one_line(tmp_path, cli):
    env = "tests.integration.crashing_envs:make_crash"
    code, out = cli(*train_args(tmp_path, env=env, stop=10_000, env_config={"every": 150},
                                max_env_runner_crashes=2)).finish()
    assert code != 0, out
    # Each life stepped its env 150 times; the crash of the 150th is counted too.
    line = assert_one_error_line(out, f"EnvCrashed: env '{env}' crashed its runner env_runner-1 "
                                 "2 times in 300 env steps (SIGSEGV)", "max_env_runner_crashes=2")
    # One short line a death on the console; the crash dump is in the runner's log only.
    deaths = [s for s in out.splitlines() if "env_runner-1 died: killed by SIGSEGV" in s]
    assert len(deaths) == 2 and "not restarted" in deaths[1], out
    assert "Fatal Python error" not in out and "most recent call first" not in out, out
    log = Path(line.rsplit("its output: ", 1)[1])
    assert "Fatal Python error: Segmentation fault" in log.read_text()


def test_a_runner_over_max_runner_memory_mb_is_warned_then_stopped_naming_its_memory(caplog):
    limit = 200  # MB; the runner starts at ~55 and its env keeps 2 MB a step (~65 MB/s)
    config = (PPOConfig().environment("tests.integration.crashing_envs:make_leak",
                                      env_config={"step_s": 0.03})
              .env_runners(num_env_runners=1, rollout_fragment_length=20)
              .training(train_batch_size=40, minibatch_size=40, num_epochs=1,
                        model={"fcnet_hiddens": [16]})
              .fault_tolerance(max_runner_memory_mb=limit, max_env_runner_crashes=1))
    with caplog.at_level("WARNING"), config.build() as algo:
        with pytest.raises(EnvCrashed) as raised:
            for _ in range(15):  # the env stops leaking at 400 MB: no limit, no error
                algo.train()
    message = str(raised.value)
    assert "its runner env_runner-1 went over max_runner_memory_mb once" in message, message
    rss = float(re.search(rf"memory: ([\d,]+) MB of {limit} MB", message)[1].replace(",", ""))
    assert limit <= rss < limit * 1.5, message  # stopped near the limit, not at 400 MB
    warned = [r.getMessage() for r in caplog.records if "of max_runner_memory_mb" in r.getMessage()]
    assert warned and warned[0].startswith("env_runner-1 memory: holds"), warned


@pytest.mark.parametrize("learners", [0, 1], ids=["learner_in_driver", "learner_process"])
def test_a_learner_update_far_longer_than_usual_is_named_with_rlmesh_stack(caplog, monkeypatch,
                                                                           learners):
    monkeypatch.setenv("RLMESH_TEST_SLEEP_S", "3")  # the 4th update's loss sleeps 3 s
    config = (PPOConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=1)
              .training(train_batch_size=200, minibatch_size=200, num_epochs=1,
                        model={"fcnet_hiddens": [16]},
                        learner_class="tests.integration.slow_learners:SleepyLearner")
              .learners(num_learners=learners)
              .fault_tolerance(stuck_learner_warn_s=1))
    with caplog.at_level("WARNING"), config.build() as algo:
        pid = algo.mesh.learners.foreach("pid")[0] if learners else os.getpid()
        for _ in range(5):
            algo.train()
    slow = [r.getMessage() for r in caplog.records if " slow: " in r.getMessage()]
    name = "learner-0" if learners else "learner (in the driver process)"
    assert len(slow) == 1, slow  # once, while it ran; the updates after it were not slow
    assert slow[0].startswith(f"{name} slow: update 4 of policy 'default_policy' has run "), slow
    assert f"`rlmesh stack --pid {pid}` shows where it is" in slow[0], slow
