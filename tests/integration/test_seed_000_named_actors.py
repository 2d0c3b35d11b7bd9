"""Seed 000's "Global Coordination" with ``ray`` -> ``rlmesh``: an ``@rlmesh.remote`` class
started from the driver with ``X.remote()``, registered with
``rlmesh.experimental.named_actors.register_actor``, incremented by the envs of a later run's
env runner and read in the driver with ``rlmesh.get``; the actor process ends with
``rlmesh.kill``, with the driver's exit and with a driver killed outright; a method that
raises, an unknown name and a launched cluster each come back as one clear error."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

import rlmesh
from rlmesh.config.settings import ConfigError
from rlmesh.experimental import named_actors
from rlmesh.named_actors import ActorNotFound, RemoteError, start_named_actors
from rlmesh.runtime import ActorUnavailable
from rlmesh.runtime.job import Job, set_job_factory

HERE = Path(__file__).parent


@rlmesh.remote
class Tally:
    """A counter with a starting value, and a method that raises."""

    def __init__(self, start: int = 0) -> None:
        self.count = start

    def inc(self, n: int) -> int:
        self.count += n
        return self.count

    def get(self) -> int:
        return self.count

    def pid(self) -> int:
        return os.getpid()

    def divide(self, by: int) -> float:
        return self.count / by


def gone(pid: int, within: float = 5.0) -> bool:
    """Whether process ``pid`` has ended (a zombie counts: it waits for a parent to reap
    it) within ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)


def run_script(path: Path, runs_root: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "RLMESH_RUNS_ROOT": str(runs_root)}
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=path.parent)


def test_the_pages_global_counter_counts_every_env_step_of_a_run(runs_root):
    # The user's script as the page writes it, run as `python script.py`: the counter starts
    # in the driver, the envs of the PPO run's runner increment it, the driver reads it.
    done = run_script(HERE / "seed_000_global_counter.py", runs_root)
    assert done.returncode == 0, done.stderr[-3000:]
    first, *_, last = done.stdout.strip().splitlines()
    out = json.loads(last)
    assert first == "0"
    assert out["count"] == out["env_steps"] == out["steps_sampled"] > 0
    assert gone(out["pid"]), "the counter's process outlived the driver's exit"


DRIVER = """
import os, sys, time
import rlmesh

@rlmesh.remote
class Holder:
    def __init__(self, stopped_file):
        self.stopped_file = stopped_file

    def pid(self):
        return os.getpid()

    def on_stop(self):
        open(self.stopped_file, "w").close()

if __name__ == "__main__":
    holder = Holder.remote(sys.argv[1])
    print(holder.pid(), flush=True)
    if sys.argv[2] == "hang":
        time.sleep(60)
"""


@pytest.mark.parametrize("end", ["exit", "hang"])
def test_the_actor_ends_with_its_driver(runs_root, tmp_path, end):
    # A driver that returns stops its actors (their on_stop runs); one killed outright
    # takes them with it.
    script, stopped = tmp_path / "driver.py", tmp_path / "stopped"
    script.write_text(DRIVER)
    env = {**os.environ, "RLMESH_RUNS_ROOT": str(runs_root)}
    driver = subprocess.Popen([sys.executable, str(script), str(stopped), end],
                              stdout=subprocess.PIPE, text=True, env=env)
    try:
        actor_pid = int(driver.stdout.readline())
        assert psutil.Process(actor_pid).ppid() == driver.pid  # a child of the driver
        if end == "hang":
            driver.send_signal(signal.SIGKILL)
        assert driver.wait(30) == (0 if end == "exit" else -signal.SIGKILL)
    finally:
        driver.kill()
    assert gone(actor_pid), "the actor outlived its driver"
    assert stopped.exists() == (end == "exit")


def test_remote_get_register_and_kill_from_the_driver():
    tally = Tally.remote(5)  # positional, as Ray takes them
    assert rlmesh.get(tally.inc.remote(2)) == 7 and tally.get() == 7
    named_actors.register_actor("global_tally", tally)
    assert named_actors.get_actor("global_tally") is tally
    named_actors.get_actor("global_tally").inc.remote(1)
    assert rlmesh.get([tally.get.remote(), tally.divide.remote(4)]) == [8, 2.0]

    with pytest.raises(RemoteError) as raised:
        rlmesh.get(tally.divide.remote(0))
    assert str(raised.value).splitlines()[0] == (
        f"ZeroDivisionError in actor {tally.name!r}: division by zero")
    assert tally.get() == 8  # it lives on

    pid = tally.pid()
    assert psutil.Process(pid).ppid() == os.getpid()
    rlmesh.kill(tally)
    assert gone(pid, within=0.1)  # kill waits for the process to end
    with pytest.raises(ActorUnavailable, match="stopped"):
        tally.get()
    with pytest.raises(RuntimeError, match="no run in this process and no actor registered"):
        named_actors.get_actor("global_tally")  # the name went with it
    rlmesh.kill(tally)  # again: nothing to do, as Ray's


def test_an_unknown_name_is_one_line_listing_the_registered_ones():
    first, second = Tally.remote(), Tally.options(name="second_tally").remote(start=3)
    try:
        named_actors.register_actor("global_tally", first)
        assert named_actors.get_actor("second_tally").get() == 3
        with pytest.raises(ActorNotFound) as raised:
            named_actors.get_actor("global_counter")
        assert str(raised.value) == (
            "no actor named 'global_counter' (registered: global_tally, second_tally); register "
            "one with named_actors.register_actor(name, YourClass.remote())")
        with pytest.raises(ValueError, match="that name is Tally-.*; pick another"):
            named_actors.register_actor("global_tally", second)
    finally:
        rlmesh.kill(first)
        rlmesh.kill(second)


def test_runs_get_the_names_a_cluster_refuses_them_and_bad_calls_are_one_line():
    tally = Tally.remote()
    try:
        named_actors.register_actor("global_tally", tally)
        job = Job("ipc")  # a run's job, as the mesh makes it (not started: only its names)
        asyncio.run(start_named_actors(job, {}))
        assert job.run_dir.lookup_name("global_tally") == tally._handle.address
        with pytest.raises(ConfigError, match="global_tally is already an actor the driver"):
            asyncio.run(start_named_actors(Job("ipc"), {"global_tally": "pkg.mod:Counter"}))

        set_job_factory(lambda request: None)  # as `rlmesh launch` does
        try:
            with pytest.raises(ConfigError) as raised:
                asyncio.run(start_named_actors(Job("ipc"), {}))
        finally:
            set_job_factory(None)
        assert str(raised.value) == (
            "named actors global_tally were started in the driver (X.remote()), which a launched "
            "cluster's nodes cannot reach; start them with the run instead: "
            "config.callbacks(named_actors={name: Class})")
        assert "\n" not in str(raised.value)
    finally:
        rlmesh.kill(tally)

    for call, message in [
            (lambda: Tally.remote(1, 2), r"^Tally.remote\(\): too many positional arguments$"),
            (lambda: Tally.options(lifetime="detached"), "dies with the driver that started it"),
            (lambda: Tally.options(nme="x"), "not 'nme'"),
            (lambda: rlmesh.kill(42), "rlmesh.kill takes a handle that YourClass.remote()"),
            (lambda: named_actors.register_actor("x", 42), r"takes the handle YourClass.remote\(\)")]:
        with pytest.raises(TypeError, match=message) as raised:
            call()
        assert "\n" not in str(raised.value)
    with pytest.raises(ConfigError, match=r"^register_actor\('env_runner-1', ...\): 'env_runner-1' "
                                          "is the name of one of the run's own processes"):
        Tally.options(name="env_runner-1").remote()  # the actor it started is stopped again
