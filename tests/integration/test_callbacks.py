"""Callbacks: every hook of RLlib's set fires, in its order, in the process it belongs to
(env runners, evaluation runners, learner, driver); a misspelled hook is an error naming
the right one; log_level DEBUG shows every process's messages, with its role."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from rlmesh.algorithms import ConfigError, PPOConfig
from rlmesh.callbacks import HOOKS, Callbacks

LOG_ENV = "RLMESH_TEST_HOOK_LOG"


class RecordingCallbacks(Callbacks):
    """Appends "<hook> <where> <pid>" to the file $RLMESH_TEST_HOOK_LOG for each hook (the
    runners and the learner are other processes; one O_APPEND write a line keeps order)."""

    def _note(self, hook: str, where: str = "driver") -> None:
        fd = os.open(os.environ[LOG_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, f"{hook} {where} {os.getpid()}\n".encode())
        finally:
            os.close(fd)

    def on_algorithm_init(self, *, algorithm, **kw):
        self._note("on_algorithm_init")

    def on_environment_created(self, *, env_runner, env, env_context, **kw):
        self._note("on_environment_created", _runner(env_runner))

    def on_episode_created(self, *, episode, env_runner, env_index, **kw):
        assert episode.last_observation is None  # before the reset
        self._note("on_episode_created", _runner(env_runner))

    def on_episode_start(self, *, episode, env_runner, env_index, **kw):
        self._note("on_episode_start", _runner(env_runner))

    def on_episode_step(self, *, episode, env_runner, env_index, **kw):
        if episode.length == 1:  # one line per episode is enough
            self._note("on_episode_step", _runner(env_runner))

    def on_episode_end(self, *, episode, env_runner, env_index, **kw):
        self._note("on_episode_end", _runner(env_runner))

    def on_postprocess_trajectory(self, *, env_runner, policy_id, policies, postprocessed_batch,
                                  **kw):
        assert postprocessed_batch["rewards"].ndim == 2  # time-major [T, B]
        self._note("on_postprocess_trajectory", _runner(env_runner))

    def on_sample_end(self, *, env_runner, samples, **kw):
        self._note("on_sample_end", _runner(env_runner))

    def on_learn_on_batch(self, *, policy, train_batch, result, **kw):
        result["seen_by_callbacks"] = 1.0
        self._note("on_learn_on_batch", "learner")

    def on_train_result(self, *, algorithm, result, **kw):
        result["train_result_hook"] = True
        self._note("on_train_result")

    def on_evaluate_start(self, *, algorithm, **kw):
        self._note("on_evaluate_start")

    def on_evaluate_end(self, *, algorithm, evaluation_metrics, **kw):
        evaluation_metrics["evaluate_end_hook"] = True
        self._note("on_evaluate_end")

    def on_checkpoint_loaded(self, *, algorithm, **kw):
        self._note("on_checkpoint_loaded")


def _runner(env_runner) -> str:
    return f"{'eval' if env_runner.in_evaluation else 'train'}{env_runner.worker_index}"


def test_every_hook_fires_in_order_in_its_process(tmp_path, monkeypatch):
    log = tmp_path / "hooks.log"
    monkeypatch.setenv(LOG_ENV, str(log))  # the runner and learner processes inherit it
    config = (PPOConfig().environment("CartPole-v1")
              # 500 steps: CartPole's time limit, so an episode ends in the one fragment
              # sampled whatever the untrained policy does (with 100, a first episode that
              # outlasted the fragment left no on_episode_end: seen once in a full run)
              .env_runners(num_env_runners=1, rollout_fragment_length=500)
              .learners(num_learners=1)
              .training(train_batch_size=500, minibatch_size=500, num_epochs=1)
              .evaluation(evaluation_interval=1, evaluation_duration=1,
                          evaluation_num_env_runners=1)
              .callbacks(RecordingCallbacks))
    with config.build() as algo:
        result = algo.train()
        path = algo.save(tmp_path / "checkpoint")
        algo.restore(path)
    assert result["train_result_hook"] is True
    assert result["evaluation"]["evaluate_end_hook"] is True
    assert result["info"]["learner"]["default_policy"]["seen_by_callbacks"] == 1.0
    lines = [line.split() for line in log.read_text().splitlines()]
    order = [hook for hook, _, _ in lines]
    assert set(order) == set(HOOKS), set(HOOKS) - set(order)

    def first(hook: str, where: str | None = None) -> int:
        return next(i for i, (h, w, _) in enumerate(lines) if h == hook and where in (None, w))

    # Envs are made as the runners start, before the algorithm is ready.
    assert first("on_environment_created", "train1") < first("on_algorithm_init")
    assert first("on_environment_created", "eval1") < first("on_algorithm_init")
    for where in ("train1", "eval1"):  # an episode's hooks in order, in each runner
        assert (first("on_episode_created", where) < first("on_episode_start", where)
                < first("on_episode_step", where) < first("on_episode_end", where))
    assert (first("on_algorithm_init") < first("on_postprocess_trajectory")
            < first("on_sample_end") < first("on_learn_on_batch") < first("on_evaluate_start")
            < first("on_episode_start", "eval1") < first("on_evaluate_end")
            < first("on_train_result") < first("on_checkpoint_loaded"))
    pids = {where: {pid for _, w, pid in lines if w == where} for _, where, _ in lines}
    assert len({next(iter(p)) for p in pids.values()}) == 4  # driver, runner, eval, learner
    assert all(len(p) == 1 for p in pids.values())


class MisspelledCallbacks(Callbacks):
    def on_episode_ended(self, *, episode, **kw):
        pass


def test_a_misspelled_hook_is_an_error_naming_the_hook():
    config = PPOConfig().environment("CartPole-v1").callbacks(MisspelledCallbacks)
    with pytest.raises(ConfigError, match=r"on_episode_ended is not a callback hook.*"
                                          r"did you mean 'on_episode_end'"):
        config.build()


def test_cli_misspelled_hook_is_one_line(tmp_path):
    path = "tests.integration.test_callbacks:MisspelledCallbacks"
    out = subprocess.run([sys.executable, "-m", "rlmesh.cli.main", "train", "--run", "PPO",
                          "--env", "CartPole-v1", "--local-dir", str(tmp_path),
                          "--config", json.dumps({"callbacks": path})],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "rlmesh train: error: callbacks MisspelledCallbacks.on_episode_ended is not a callback "
        "hook, so it would never be called; did you mean 'on_episode_end'?"]


def _train_with_log_level(tmp_path, level: str | None) -> tuple[str, str]:
    config = {"num_env_runners": 1, "num_learners": 1, "train_batch_size": 100,
              "minibatch_size": 100, "rollout_fragment_length": 100, "num_epochs": 1}
    out = subprocess.run([sys.executable, "-m", "rlmesh.cli.main", "train", "--run", "PPO",
                          "--env", "CartPole-v1", "--local-dir", str(tmp_path), "--config",
                          json.dumps(config), "--stop", '{"training_iteration": 2}',
                          *(["--log-level", level] if level else [])],
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    [log_file] = tmp_path.glob("*/*/rlmesh.log")
    return out.stdout + out.stderr, log_file.read_text()


def test_debug_log_level_shows_every_process_with_its_role(tmp_path):
    console, log_file = _train_with_log_level(tmp_path / "debug", "DEBUG")
    for text in (console, log_file):
        assert "DEBUG [env_runner-1] rlmesh.roles.env_runner: fragment" in text
        assert "DEBUG [learner-0] rlmesh.roles.learner: update" in text
        assert "DEBUG [driver] rlmesh.driver.algorithm: iteration 2" in text
    console, log_file = _train_with_log_level(tmp_path / "default", None)
    assert "[env_runner-1]" not in console and "DEBUG" not in log_file
