"""Policy client benchmarks (issue 6), each beside a reference measured in the same run.

Remote ``get_action`` latency beside a raw pyzmq REQ/REP round trip of the same bytes
(tcp loopback), and local-inference env steps/s of a simulator loop beside an EnvRunner
stepping the same env with the same model. ``python -m tests.benchmarks.bench_client
rep|sim ...`` are the peer processes; ``tests.benchmarks.run`` drives everything.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import zmq

from . import children
from .bench_runtime import NEW_SESSION, ROOT, Row, _blocking, _run

SERVER = "rlmesh.roles.policy_server:PolicyServerRunner"
RUNNER = "rlmesh.roles.env_runner:EnvRunner"
ENV = "CartPole-v1"
MODEL = {"fcnet_hiddens": [64, 64]}
FRAGMENT = 1000  # steps per EnvRunner fragment, and per chunk a local client ships
ROUNDS = 5  # latency: rlmesh and raw take turns this many times


@dataclass(frozen=True)
class ClientSizes:
    """How much work each client benchmark does; ``quick`` trades precision for time."""

    latency_warmup: int  # calls on each side before the clock
    latency_iters: int  # timed calls on each side, over ROUNDS turns
    throughput_steps: int  # env steps per side and round, at most the server's buffer
    throughput_rounds: int  # turns; the median rate is reported


DEFAULT = ClientSizes(latency_warmup=1000, latency_iters=20000, throughput_steps=15000,
                      throughput_rounds=5)
QUICK = ClientSizes(latency_warmup=300, latency_iters=3000, throughput_steps=5000,
                    throughput_rounds=2)


def _config(**env_runners: Any) -> dict[str, Any]:
    """One algorithm config for both sides (PPOConfig's defaults; no PPO is built)."""
    import gymnasium as gym

    from rlmesh.algorithms.ppo_config import PPOConfig

    env = gym.make(ENV)
    cfg = (PPOConfig().environment(ENV, observation_space=env.observation_space,
                                   action_space=env.action_space)
           .env_runners(rollout_fragment_length=FRAGMENT, num_envs_per_env_runner=1, **env_runners)
           .training(model=MODEL).debugging(seed=0))
    return {**cfg.to_dict(), "_env_registry": {}}


def _server_config(**env_runners: Any) -> dict[str, Any]:
    # Plaintext, as the raw zmq peers it is measured against (CURVE is the default).
    return _config(policy_server_address="tcp://127.0.0.1:0", policy_server_idle_timeout_s=0.5,
                   policy_server_insecure_plaintext=True, **env_runners)


def _cartpole_observations(n: int) -> list[np.ndarray]:
    """Observations a CartPole simulator would send (random actions, resets included)."""
    import gymnasium as gym

    env = gym.make(ENV)
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=0)
    out = []
    for _ in range(n):
        out.append(np.asarray(obs, np.float32))
        obs, _, terminated, truncated, _ = env.step(int(rng.integers(2)))
        if terminated or truncated:
            obs, _ = env.reset()
    return out


# --- 1. remote get_action latency ---

def _get_action_frames(observation: np.ndarray) -> tuple[bytes, bytes]:
    """A get_action request and its reply as rlmesh encodes them (one frame each)."""
    from rlmesh.wire import codec
    from rlmesh.wire import messages as M

    eid = f"{0x12345:x}-{time.monotonic_ns():x}-0"  # the length of Episodes' ids
    request = codec.encode(M.make(M.CALL, id=123456, m="get_action", a=[eid, observation], k={}))
    reply = codec.encode(M.make(M.REPLY, id=123456, r=1))
    assert len(request) == len(reply) == 1, "expected single-frame messages"
    return bytes(request[0]), bytes(reply[0])


def _serve_rep(address: str, reply_hex: str, spin_us: str = "0") -> None:
    """Answer every request with the same small msgpack reply (blocking REP); with
    ``spin_us``, poll for the next request that long before blocking, as the policy
    server does by default (``policy_server_spin_wait_us``)."""
    from rlmesh.wire.sockets import SpinWait

    reply = bytes.fromhex(reply_hex)
    spin = SpinWait(float(spin_us) / 1e6)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.REP)
    sock.bind(address)
    print(sock.getsockopt_string(zmq.LAST_ENDPOINT), flush=True)
    while True:
        sock.recv()
        sock.send(reply)
        spin.wait(sock)


class Peer:
    """A peer process of this module (``rep`` or ``sim``), in a session of its own like the
    actors; its first line of output is read at start (the bound endpoint, or ready)."""

    def __init__(self, *args: str) -> None:
        self.proc = children.popen([sys.executable, "-m", __name__, *args], cwd=ROOT,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     start_new_session=NEW_SESSION)
        self.first_line = self.read_line(f"starting {args[0]}")

    def read_line(self, what: str) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"peer exited with code {self.proc.wait(5)} before {what}")
        return line.strip()

    def close(self, terminate: bool = True) -> None:
        """Stop it: EOF on stdin (a simulator flushes its client and exits), then SIGTERM."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        if terminate:
            self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _timed_raw(sock: zmq.Socket, payload: bytes, n: int) -> np.ndarray:
    clock = time.perf_counter_ns
    times = np.empty(n, dtype=np.int64)
    for i in range(n):
        t0 = clock()
        sock.send(payload)
        sock.recv()
        times[i] = clock() - t0
    return times


def _timed_get_action(client: Any, observations: list[np.ndarray], n: int) -> np.ndarray:
    """``n`` get_action calls on one episode, each timed; the episode is ended after."""
    clock = time.perf_counter_ns
    times = np.empty(n, dtype=np.int64)
    k = len(observations)
    eid = client.start_episode()
    for i in range(n):
        obs = observations[i % k]
        t0 = clock()
        client.get_action(eid, obs)
        times[i] = clock() - t0
    client.end_episode(eid, observations[n % k])
    return times


def _timed_log_returns(client: Any, observations: list[np.ndarray], n: int) -> np.ndarray:
    """``n`` log_returns calls: a remote call whose server side does next to nothing."""
    clock = time.perf_counter_ns
    times = np.empty(n, dtype=np.int64)
    eid = client.start_episode()
    client.get_action(eid, observations[0])
    for i in range(n):
        t0 = clock()
        client.log_returns(eid, 0.0)
        times[i] = clock() - t0
    client.end_episode(eid, observations[1])
    return times


async def _latency_rounds(endpoints: dict[str, str], payload: bytes,
                          sizes: ClientSizes) -> dict[str, np.ndarray]:
    """Per-call times (ns) of each side, by name: ``raw`` and ``raw_spin`` (the REP peers
    in ``endpoints``), ``get_action`` and ``log_returns`` against the policy server as
    configured by default, ``get_action_no_spin`` against one with spinning off."""
    from rlmesh.client import PolicyClient
    from rlmesh.runtime import Job

    observations = _cartpole_observations(512)
    ctx = zmq.Context()
    raws = {}
    for name, endpoint in endpoints.items():
        raws[name] = ctx.socket(zmq.REQ)
        raws[name].connect(endpoint)
    times: dict[str, list[np.ndarray]] = {}
    clients: list[Any] = []
    try:
        async with Job("ipc") as job:
            server = await job.spawn(SERVER, config=_server_config(), worker_index=1, param_server=None)
            still = await job.spawn(SERVER, config=_server_config(policy_server_spin_wait_us=0), worker_index=2,
                                    param_server=None)
            for s in (server, still):
                clients.append(await _blocking(functools.partial(
                    PolicyClient, insecure_plaintext=True), await s.call("get_address")))
            client, still_client = clients
            # The clients block in a worker thread; the job's loop idles meanwhile.
            sides = {
                **{name: (_timed_raw, sock, payload) for name, sock in raws.items()},
                "get_action": (_timed_get_action, client, observations),
                "log_returns": (_timed_log_returns, client, observations),
                "get_action_no_spin": (_timed_get_action, still_client, observations),
            }
            for fn, *args in sides.values():
                await _blocking(fn, *args, sizes.latency_warmup)
            for s in (server, still):
                await s.call("sample")  # drain what the servers recorded
            n = sizes.latency_iters // ROUNDS
            for _ in range(ROUNDS):  # take turns, so all see the same background load
                for name, (fn, *args) in sides.items():
                    gc.collect()
                    times.setdefault(name, []).append(await _blocking(fn, *args, n))
                for s, calls in ((server, n + 1), (still, n)):
                    fragment = await s.call("sample")  # untimed; keeps the servers' memory flat
                    assert fragment["env_steps"] == calls, (fragment["env_steps"], calls)
            spins = [(await s.call("metrics"))["spins"] for s in (server, still)]
            assert spins[0] > 0 and spins[1] == 0, spins
    finally:
        for c in clients:
            await _blocking(c.close)
        ctx.destroy(linger=0)
    return {name: np.concatenate(parts) for name, parts in times.items()}


def bench_latency(sizes: ClientSizes, tmp: Path) -> list[Row]:
    from rlmesh.config.base import AlgorithmConfig

    spin_us = AlgorithmConfig().policy_server_spin_wait_us
    request, reply = _get_action_frames(np.zeros(4, np.float32))
    peers = {"raw": Peer("rep", "tcp://127.0.0.1:*", reply.hex()),
             "raw_spin": Peer("rep", "tcp://127.0.0.1:*", reply.hex(), str(spin_us))}
    try:
        t = _run(lambda: _latency_rounds({k: p.first_line for k, p in peers.items()},
                                         request, sizes))
    finally:
        for p in peers.values():
            p.close()

    def us(name: str, q: float = 50) -> float:
        return float(np.percentile(t[name], q)) / 1e3

    peer = f"raw pyzmq REQ/REP, {len(request)} B request, {len(reply)} B msgpack reply"
    spinning = f"the same REQ/REP, the REP polling {spin_us:g} µs for the next request"
    bench = "client get_action, remote, tcp, 4 float32"
    return [Row(bench, "p50 µs", us("get_action"), us("raw"), peer, goal=2.0),
            Row(bench, "p99 µs", us("get_action", 99), us("raw", 99), peer),
            # Context, not goals: a call whose server side does next to nothing; the
            # server's polling off; and the raw server polling as the policy server does.
            Row("client log_returns, remote, tcp", "p50 µs", us("log_returns"), us("raw"), peer),
            Row(bench + ", policy_server_spin_wait_us=0", "p50 µs", us("get_action_no_spin"),
                us("raw"), peer),
            Row(bench, "p50 µs", us("get_action"), us("raw_spin"), spinning)]


# --- 2. local-inference throughput ---

def _simulate(address: str) -> None:
    """The simulator process: a CartPole loop with a local-inference client. Reads a step
    count per line on stdin, answers the seconds those steps took; stops on EOF."""
    import gymnasium as gym

    from rlmesh.client import PolicyClient

    env = gym.make(ENV)
    with PolicyClient(address, inference_mode="local", insecure_plaintext=True) as client:
        print("ready", flush=True)
        eid, (obs, _) = client.start_episode(), env.reset(seed=0)
        for line in sys.stdin:
            steps = int(line)
            t0 = time.perf_counter()
            for _ in range(steps):
                obs, reward, terminated, truncated, _ = env.step(client.get_action(eid, obs))
                client.log_returns(eid, reward)
                if terminated or truncated:
                    client.end_episode(eid, obs, truncated=truncated and not terminated)
                    eid, (obs, _) = client.start_episode(), env.reset()
            print(time.perf_counter() - t0, flush=True)
        # Ends the open episode, which ships every step: close() itself would have to
        # flush them, and raises RuntimeError instead (the client is marked closed first).
        client.end_episode(eid, obs, truncated=True)


class Simulator(Peer):
    """The simulator process, asked for a number of steps at a time."""

    def __init__(self, address: str) -> None:
        super().__init__("sim", address)

    def run(self, steps: int) -> float:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{steps}\n")
        self.proc.stdin.flush()
        return float(self.read_line("answering"))


async def _throughput_rounds(sizes: ClientSizes) -> tuple[list[float], list[float], list[float]]:
    from rlmesh.runtime import Job

    from rlmesh.roles.policy_server import MAX_BUFFERED_FRAGMENTS

    # A round, and what the client held back from the one before (under a fragment), fit
    # the server's buffer: nothing is dropped before the drain after it.
    fragments = min(max(1, sizes.throughput_steps // FRAGMENT), MAX_BUFFERED_FRAGMENTS - 1)
    steps = fragments * FRAGMENT
    ours: list[float] = []
    theirs: list[float] = []
    sampled: list[float] = []
    received = 0
    async with Job("ipc") as job:
        server = await job.spawn(SERVER, config=_server_config(), worker_index=1, param_server=None)
        runner = await job.spawn(RUNNER, config=_config(), worker_index=1, param_server=None)
        sim = await _blocking(Simulator, await server.call("get_address"))
        try:

            async def sample_all() -> float:
                t0 = time.perf_counter()
                for _ in range(fragments):
                    await runner.call("sample")
                return time.perf_counter() - t0

            async def simulate(n: int, sampled: bool) -> float:
                """Run the simulator; ``sampled``: while a trainer samples the server (it
                then buffers a fragment or two), else the server only buffers (drained
                after, untimed: a round fits its buffer, so nothing is dropped)."""
                nonlocal received
                done = not sampled

                async def drain() -> None:
                    nonlocal received
                    while not done:  # sample() returns once a fragment's worth is in
                        received += (await server.call("sample"))["env_steps"]

                task = asyncio.ensure_future(drain())
                try:
                    return await _blocking(sim.run, n)
                finally:
                    done = True
                    await task
                    received += (await server.call("sample"))["env_steps"]

            await simulate(FRAGMENT, False)  # warm-up: connections, caches
            await runner.call("sample")
            for _ in range(sizes.throughput_rounds):  # alternate, so all see the same load
                gc.collect()
                theirs.append(steps / await sample_all())
                gc.collect()
                ours.append(steps / await simulate(steps, False))
                gc.collect()
                sampled.append(steps / await simulate(steps, True))
        finally:
            await _blocking(sim.close, False)
        received += (await server.call("sample"))["env_steps"]  # what close() flushed
        stats = await server.call("metrics")
    expected = FRAGMENT + 2 * steps * sizes.throughput_rounds
    assert received == expected, (received, expected)
    assert stats["steps_dropped"] == 0, stats
    return ours, theirs, sampled


def bench_throughput(sizes: ClientSizes, tmp: Path) -> list[Row]:
    ours, theirs, sampled = _run(lambda: _throughput_rounds(sizes))
    med = statistics.median
    peer = f"EnvRunner.sample(), 1 env, fragments of {FRAGMENT}"
    return [Row(f"client, local inference, {ENV}", "env steps/s", med(ours), med(theirs), peer,
                goal=0.8, higher_is_better=True),
            # Context, not a goal: the same while the driver samples the server meanwhile,
            # as training does (more processes busy at once on a small machine).
            Row(f"client, local inference, {ENV}, server sampled meanwhile", "env steps/s",
                med(sampled), med(theirs), peer)]


BENCHMARKS = {
    "client_latency": bench_latency,
    "client_throughput": bench_throughput,
}


if __name__ == "__main__":
    role, *args = sys.argv[1:]
    try:
        {"rep": _serve_rep, "sim": _simulate}[role](*args)
    except KeyboardInterrupt:
        pass
