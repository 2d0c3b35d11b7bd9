"""Running one trial and hearing from it: an algorithm trial in its own process (worker.py),
a function trainable on a thread. Both put (trial_id, kind, payload) events on one queue,
and take the sweep's decision after each result."""

from __future__ import annotations

import base64
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from rlmesh.env.registry import env_registry
from rlmesh.runtime import handed


# Event kinds: "result" (a dict), "saved" ([iteration, path]), "exit" (exit code, error text)


class ProcessTrial:
    """An algorithm trial: ``python -m rlmesh.tune.worker`` in a session of its own."""

    def __init__(self, trial, events: queue.Queue, checkpoint_freq: int = 0,
                 cluster: dict | None = None, trackers: dict | None = None,
                 experiment: str | None = None):
        self.trial = trial
        self.events = events
        trial_dir = Path(trial.dir)
        trial_dir.mkdir(parents=True, exist_ok=True)
        spec = {"run": trial.run, "config": trial.config, "stop": trial.stop,
                "trial_dir": trial.dir, "trial_id": trial.trial_id,
                "restore": trial.restore_from, "checkpoint_freq": checkpoint_freq,
                "cluster": cluster, "env_registry": env_registry(),
                "trackers": trackers or {}, "experiment": experiment}
        spec_path = trial_dir / "trial_spec.json"
        spec_path.write_text(json.dumps(spec))
        from rlmesh.runtime.process import ONE_THREAD_PER_LIBRARY

        env = {**ONE_THREAD_PER_LIBRARY, **os.environ, "PYTHONUNBUFFERED": "1"}
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "rlmesh.tune.worker", str(spec_path), str(os.getpid())],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, bufsize=1, start_new_session=True, env=env)
        # The first line on its stdin, the spawn channel: the sweep's lambdas and local
        # definitions (rlmesh/runtime/handed.py), which its own children are handed in turn.
        try:
            self.popen.stdin.write(base64.b64encode(handed.payload()).decode() + "\n")
            self.popen.stdin.flush()
        except BrokenPipeError:  # it died at once; its exit event is on the way
            pass
        self._reader = threading.Thread(target=self._read, daemon=True,
                                        name=f"rlmesh.tune.{trial.trial_id}")
        self._reader.start()

    def _read(self) -> None:
        tid = self.trial.trial_id
        for line in self.popen.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            for kind, payload in message.items():
                self.events.put((tid, kind, payload))
        code = self.popen.wait()
        error = "" if code in (0, 130, 143) else _log_tail(Path(self.trial.dir) / "trial.log")
        self.events.put((tid, "exit", (code, error)))

    def decide(self, decision: dict) -> None:
        try:
            self.popen.stdin.write(json.dumps(decision) + "\n")
            self.popen.stdin.flush()
        except (BrokenPipeError, ValueError):  # it died; its exit event is on the way
            pass

    def interrupt(self) -> None:
        """Stop after the current iteration, with a checkpoint (the trial is resumed later)."""
        if self.popen.poll() is None:
            try:
                os.kill(self.popen.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.popen.wait()


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(text[-lines:])


# --- function trainables ---

class StopTrial(Exception):
    """Raised in a function trainable by report() when the sweep stops the trial."""


_session = threading.local()


def report(metrics: dict | None = None, *, checkpoint: str | os.PathLike | None = None,
           **kwargs: Any) -> None:
    """Report one iteration's metrics from a function trainable (and, optionally, a
    checkpoint folder it wrote); returns when the sweep lets the trial go on."""
    session = getattr(_session, "value", None)
    if session is None:
        raise RuntimeError("rlmesh.tune.report() is called from a function trainable that "
                           "rlmesh.tune.run() runs; outside one there is no sweep to report to")
    session.report({**(metrics or {}), **kwargs}, checkpoint)


def get_checkpoint() -> str | None:
    """The checkpoint folder a function trainable starts from (resume, PBT), or None."""
    session = getattr(_session, "value", None)
    return None if session is None else session.trial.restore_from


def get_trial_dir() -> str | None:
    session = getattr(_session, "value", None)
    return None if session is None else session.trial.dir


class FunctionTrial:
    """A function trainable ``fn(config)`` calling report() (or Tune's older ``fn(config,
    reporter)``, calling ``reporter(**metrics)``), on a thread of the sweep. Algorithms it
    built and left running are stopped when it ends (driver/live_runs.py)."""

    def __init__(self, trial, events: queue.Queue, fn: Callable, pool=None):
        self.trial = trial
        self.events = events
        self.fn = fn
        self._decisions: queue.Queue = queue.Queue()
        self._stopping = False
        self._iteration = trial.iteration
        self._started = time.monotonic()
        self._elapsed_before = trial.elapsed  # time of its earlier runs (resumed, exploited)
        Path(trial.dir).mkdir(parents=True, exist_ok=True)
        self.logger = None
        from rlmesh.tune.train_loop import Stopper

        self._stopper = Stopper(trial.stop)
        # A pool's idle thread, where the sweep gives one: starting a thread per trial cost
        # 10 ms each (the new thread waits for the GIL), a third of 100 trivial trials' time.
        self._done = threading.Event()
        if pool is not None:
            pool.submit(self._run)
        else:
            threading.Thread(target=self._run, daemon=True,
                             name=f"rlmesh.tune.{trial.trial_id}").start()

    def report(self, metrics: dict, checkpoint) -> None:
        if self._stopping:
            raise StopTrial()
        self._iteration += 1
        now = time.monotonic()
        result = {**metrics, "training_iteration": self._iteration,
                  "time_total_s": self._elapsed_before + now - self._started}
        tid = self.trial.trial_id
        if self.logger is None:  # result.json and progress.csv, as an algorithm trial writes
            from rlmesh.results import ResultLogger

            self.logger = ResultLogger(self.trial.dir, self.trial.config, tensorboard=False,
                                       resume=True)
        self.logger.log(result)
        if checkpoint is not None:
            self.events.put((tid, "saved", [self._iteration, os.fspath(checkpoint)]))
        self.events.put((tid, "result", result))
        decision = self._decisions.get()
        why = decision.get("stop") or self._stopper.met(result, warn=lambda m: None)
        if why or self._stopping:
            raise StopTrial()

    def _run(self) -> None:
        _session.value = self
        code, error = 0, ""
        from rlmesh.driver.live_runs import stopped_at_exit
        from rlmesh.tune.legacy import Reporter, takes_reporter

        try:
            with stopped_at_exit():
                if takes_reporter(self.fn):
                    self.fn(dict(self.trial.config), Reporter(lambda m: self.report(m, None)))
                else:
                    self.fn(dict(self.trial.config))
        except StopTrial:
            pass
        except Exception as e:  # the trial fails; the sweep goes on
            import traceback

            code, error = 1, "".join(traceback.format_exception(e))[-2000:]
        finally:
            _session.value = None
            if self.logger is not None:
                self.logger.close()
        if self._stopping and code == 0:
            code = 143  # stopped by the sweep's interrupt: resumed later
        self._done.set()
        self.events.put((self.trial.trial_id, "exit", (code, error)))

    def decide(self, decision: dict) -> None:
        self._decisions.put(decision)

    def interrupt(self) -> None:
        self._stopping = True
        self._decisions.put({"stop": "interrupted"})

    def kill(self) -> None:
        self.interrupt()
        self._done.wait(5.0)
