"""Adding a role is one declaration plus the role's own module (issue 49, "Must show"): PPO's
SYNC topology plus a weights relay per runner (subscribed to the param server: a Publish) that
forwards each version to a tap (a Stream). Both roles live in tests/integration/toy_roles.py
and the declaration below; no file under rlmesh/ names them (asserted), so none was changed
for them. The mesh builds them, the param server pushes to the relays, the streams are opened
and reopened when either end is SIGKILLed and restarted, ``render`` draws them, and
``algo.stop()`` leaves no process behind."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any, Callable

import psutil
import pytest

from rlmesh.algorithms.ppo import PPO, PPOConfig
from rlmesh.driver.mesh import Mesh
from rlmesh.driver.topologies import SYNC
from rlmesh.driver.topology import Publish, Role, Stream, render

pytestmark = pytest.mark.timeout(120)

# The one declaration: the roles, their counts (one relay per env runner), what reaches them.
RELAYED = SYNC.plus(
    Role("echo", "tests.integration.toy_roles:WeightsRelay", label="Relay", restart="helper",
         count=lambda m: m.config.num_env_runners,
         spec=lambda m, i: {"index": i, "param_server": "param_server"
                            if m.topology.receives_weights("echo") else None}),
    Role("tap", "tests.integration.toy_roles:Tap", count=lambda m: 1, single=True,
         label="Tap", restart="helper", spec=lambda m, i: {}),
    Publish("param_server", "echo"),
    Stream("echo", "tap", "weights versions"),
    name="sync+relay")


class RelayMesh(Mesh):
    topology = RELAYED


class RelayedPPO(PPO):
    mesh_class = RelayMesh


def wait_for(what: Callable[[], Any], timeout: float = 30.0) -> Any:
    """``what()`` once it is truthy (AssertionError with its last value if it never is)."""
    deadline = time.monotonic() + timeout
    while not (value := what()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert value, value
    return value


def call(algo: PPO, actor: Any, method: str) -> Any:
    return algo.mesh.run(actor.call(method, timeout=10))


def forwarded_latest(algo: PPO) -> bool:
    """Every relay was pushed the newest version and the tap got it from each."""
    version = call(algo, algo.mesh.handles("param_server")[0], "version")
    relays = [call(algo, r, "stats") for r in algo.mesh.handles("echo")]
    got = call(algo, algo.mesh.handles("tap")[0], "stats")["got"]
    return (all(r["versions"][-1:] == [version] for r in relays)
            and all(got.get(n, [])[-1:] == [version] for n in algo.mesh.names("echo")))


def kill_and_wait_restart(algo: PPO, kind: str, index: int = 0) -> None:
    actor = algo.mesh.handles(kind)[index]
    pid, restarts = call(algo, actor, "pid"), algo.mesh.restarts_of[kind]
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: algo.mesh.restarts_of[kind] > restarts)
    assert wait_for(lambda: call(algo, actor, "pid")) != pid


def test_an_added_role_is_built_fed_supervised_drawn_and_stopped(no_children_left):
    config = (PPOConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=2, rollout_fragment_length=50)
              .training(train_batch_size=100, minibatch_size=50, num_epochs=1,
                        model={"fcnet_hiddens": [8]}))
    with RelayedPPO(config=config) as algo:
        assert algo.mesh.names("echo") == ["echo-0", "echo-1"]  # count: num_env_runners
        assert algo.mesh.names("tap") == ["tap"]
        algo.train()
        wait_for(lambda: forwarded_latest(algo))
        for relay in algo.mesh.handles("echo"):
            stats = call(algo, relay, "stats")
            assert stats["pushed"] is True and stats["sinks"] == ["tap"]
            assert stats["versions"] == sorted(set(stats["versions"]))  # newer only

        # A sink restarted: its sources are told (reset_streams) and stream to the new one.
        kill_and_wait_restart(algo, "tap")
        wait_for(lambda: all(call(algo, r, "stats")["resets"] >= 1
                             for r in algo.mesh.handles("echo")))
        algo.train()
        wait_for(lambda: forwarded_latest(algo))

        # A source restarted: it subscribes again and the mesh opens its stream again.
        kill_and_wait_restart(algo, "echo", 1)
        algo.train()
        wait_for(lambda: forwarded_latest(algo))
        assert call(algo, algo.mesh.handles("echo")[1], "stats")["resets"] == 0  # a new one

        drawing = render(algo.mesh.topology)
        assert 'echo["echo: WeightsRelay"]' in drawing and 'tap["tap: Tap"]' in drawing
        assert "echo -->|weights versions, mod| tap" in drawing
        assert "param_server -.->|weights| echo" in drawing
        pids = [call(algo, h, "pid") for k in ("echo", "tap") for h in algo.mesh.handles(k)]
    assert not [p for p in pids if _alive(p)]


def test_no_file_of_the_package_names_the_added_roles():
    package = Path(__file__).resolve().parents[2] / "rlmesh"
    naming = [p for p in package.rglob("*.py")
              if any(w in p.read_text() for w in ("toy_roles", "WeightsRelay", "RelayMesh"))]
    assert naming == []


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
