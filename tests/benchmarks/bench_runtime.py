"""Runtime benchmarks, each beside a raw pyzmq peer measured in the same run.

Round trip (call/echo vs REQ/REP), array streams (credit stream vs zero-copy PUSH/PULL),
cold start (spawn vs a bare interpreter). ``python -m tests.benchmarks.bench_runtime``
is the raw peer process; ``tests.benchmarks.run`` drives everything.
"""

from __future__ import annotations

import asyncio
import gc
import os
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterator

import numpy as np
import zmq

from . import children

ROOT = Path(__file__).resolve().parents[2]
BARE_IMPORTS = "import zmq, msgpack, numpy"
STREAM_WINDOW = 8


@dataclass(frozen=True)
class Sizes:
    """How much work each benchmark does; ``quick`` trades precision for time."""

    rtt_warmup: int
    rtt_iters: int
    stream_mb_per_pass: int  # megabytes sent per timed pass
    stream_passes: int  # timed passes; the median is reported
    cold_repeats: int  # single spawns
    cold_many_repeats: int  # gathers of COLD_MANY spawns


DEFAULT = Sizes(rtt_warmup=1000, rtt_iters=20000, stream_mb_per_pass=1024, stream_passes=5,
                cold_repeats=7, cold_many_repeats=3)
QUICK = Sizes(rtt_warmup=300, rtt_iters=3000, stream_mb_per_pass=256, stream_passes=2,
              cold_repeats=3, cold_many_repeats=1)
COLD_MANY = 8
ROUNDS = 5  # rlmesh and its reference take turns this many times
# Actor processes lead their own session, and with sched_autogroup (most Linux desktops
# and VMs) each session gets its own CPU share. Peers start the same way, or under
# background load they would get one share between them while actors get one each.
NEW_SESSION = True


@dataclass
class Row:
    """One measured figure of rlmesh beside its reference."""

    bench: str
    metric: str
    rlmesh: float
    reference: float
    peer: str  # what the reference is
    goal: float | None = None  # the ratio rlmesh/reference we aim for
    higher_is_better: bool = False

    @property
    def ratio(self) -> float:
        return self.rlmesh / self.reference if self.reference else float("nan")

    @property
    def verdict(self) -> str:
        if self.goal is None:
            return ""
        ok = self.ratio >= self.goal if self.higher_is_better else self.ratio <= self.goal
        return "met" if ok else "missed"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": self.ratio, "verdict": self.verdict}


# --- raw pyzmq peers: a separate process, started by ``raw_peer`` ---

def _bind(sock: zmq.Socket, address: str) -> str:
    sock.bind(address)
    return sock.getsockopt_string(zmq.LAST_ENDPOINT)


def _serve_rep(address: str) -> None:
    """Echo every request (blocking REP)."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.REP)
    print(_bind(sock, address), flush=True)
    while True:
        sock.send(sock.recv())


def _serve_arep(address: str) -> None:
    """Echo every request from an asyncio loop (zmq.asyncio REP on uvloop): the cost of
    asyncio itself, with nothing of rlmesh."""
    import uvloop
    import zmq.asyncio

    async def serve() -> None:
        ctx = zmq.asyncio.Context()
        sock = ctx.socket(zmq.REP)
        print(_bind(sock, address), flush=True)
        while True:
            await sock.send(await sock.recv())

    uvloop.run(serve())


def _serve_pull(data_address: str, ack_address: str) -> None:
    """Receive ``[header, array]`` without copying and count bytes; answer each b"end"."""
    ctx = zmq.Context()
    data = ctx.socket(zmq.PULL)
    data.setsockopt(zmq.RCVHWM, STREAM_WINDOW)
    ack = ctx.socket(zmq.PUSH)
    print(_bind(data, data_address), _bind(ack, ack_address), flush=True)
    items = nbytes = 0
    while True:
        frames = data.recv_multipart(copy=False)
        if len(frames) == 2:
            items += 1
            nbytes += len(frames[1])
        else:
            ack.send_string(f"{items} {nbytes}")
            items = nbytes = 0


@contextmanager
def raw_peer(*args: str) -> Iterator[list[str]]:
    """Start a raw peer process; yield the endpoints it bound; always stop it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = children.popen([sys.executable, "-m", __name__, *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                            start_new_session=NEW_SESSION)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"raw peer {args} exited with code {proc.wait(5)} before binding")
        yield line.split()
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        if proc.stdout is not None:
            proc.stdout.close()


def _addresses(mode: str, tmp: Path, *names: str) -> list[str]:
    if mode == "tcp":
        return ["tcp://127.0.0.1:*"] * len(names)
    return [f"ipc://{tmp}/{n}" for n in names]


def _run(coro_fn: Callable[[], Awaitable[Any]]) -> Any:
    import uvloop

    return uvloop.run(coro_fn())


async def _blocking(fn: Callable[..., Any], *args: Any) -> Any:
    """Run a raw (blocking) measurement in a thread: the job's loop stays free to answer
    heartbeats, and is otherwise idle, so it does not disturb the figure."""
    return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


# --- 1. request/reply round trip ---

class RawReq:
    """The blocking REQ client of the raw round trip."""

    def __init__(self, endpoint: str) -> None:
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.REQ)
        self.sock.connect(endpoint)

    def round_trip(self, payload: bytes) -> bytes:
        self.sock.send(payload)
        return self.sock.recv()

    def timed(self, payload: bytes, n: int) -> np.ndarray:
        return _timed_blocking(self.round_trip, payload, n)

    def close(self) -> None:
        self.ctx.destroy(linger=0)


async def _timed_calls(h: Any, payload: bytes, n: int) -> np.ndarray:
    clock = time.perf_counter_ns
    times = np.empty(n, dtype=np.int64)
    reply = b""
    for i in range(n):
        t0 = clock()
        reply = await h.call("echo", payload)
        times[i] = clock() - t0
    assert reply == payload, "echo returned something else"
    return times


def _timed_blocking(round_trip: Callable[[bytes], Any], payload: bytes, n: int) -> np.ndarray:
    """``n`` timed ``round_trip(payload)`` calls of a blocking caller (the raw REQ client,
    ``h.call_sync``); each must echo the payload."""
    clock = time.perf_counter_ns
    times = np.empty(n, dtype=np.int64)
    reply = b""
    for i in range(n):
        t0 = clock()
        reply = round_trip(payload)
        times[i] = clock() - t0
    assert reply == payload, "echo returned something else"
    return times


def _timed_sync_calls(h: Any, payload: bytes, n: int) -> np.ndarray:
    """``h.call_sync``: the caller blocks in its socket, as the raw REQ client does."""
    return _timed_blocking(lambda p: h.call_sync("echo", p), payload, n)


async def _timed_asyncio_req(sock: Any, payload: bytes, n: int) -> np.ndarray:
    clock = time.perf_counter_ns
    times = np.empty(n, dtype=np.int64)
    reply = b""
    for i in range(n):
        t0 = clock()
        await sock.send(payload)
        reply = await sock.recv()
        times[i] = clock() - t0
    assert reply == payload
    return times


async def _rtt_rounds(mode: str, endpoint: str, aendpoint: str, payload: bytes,
                      sizes: Sizes) -> dict[str, np.ndarray]:
    """Round-trip times of every side, taking turns: ``raw`` (blocking REQ/REP),
    ``asyncio`` (zmq.asyncio at both ends), ``call`` (``await h.call`` to an EchoActor),
    ``sync`` (the blocking ``h.call_sync`` to the same actor), ``quiet_call`` (``await
    h.call`` to an echo actor that does not poll for its next request, ``spin_wait_us = 0``)."""
    import zmq.asyncio

    from rlmesh.runtime import Job

    from .bench_actors import EchoActor, QuietEchoActor

    raw = RawReq(endpoint)
    actx = zmq.asyncio.Context()
    areq = actx.socket(zmq.REQ)
    areq.connect(aendpoint)
    times: dict[str, list[np.ndarray]] = {
        "raw": [], "asyncio": [], "call": [], "sync": [], "quiet_call": []}
    try:
        async with Job(mode) as job:
            h = await job.spawn(EchoActor)
            hq = await job.spawn(QuietEchoActor)
            sides = {"raw": lambda n: _blocking(raw.timed, payload, n),
                     "asyncio": lambda n: _timed_asyncio_req(areq, payload, n),
                     "call": lambda n: _timed_calls(h, payload, n),
                     "sync": lambda n: _blocking(_timed_sync_calls, h, payload, n),
                     "quiet_call": lambda n: _timed_calls(hq, payload, n)}
            for side in sides.values():
                await side(sizes.rtt_warmup)
            n = sizes.rtt_iters // ROUNDS
            for _ in range(ROUNDS):  # alternate, so all see the same background load
                for name, side in sides.items():
                    gc.collect()
                    times[name].append(await side(n))
    finally:
        raw.close()
        actx.destroy(linger=0)
    return {name: np.concatenate(t) for name, t in times.items()}


def bench_rtt(mode: str, sizes: Sizes, tmp: Path) -> list[Row]:
    payload = bytes(range(256)) * 4  # 1 KB
    with raw_peer("rep", *_addresses(mode, tmp, "rep")) as (endpoint,), \
            raw_peer("arep", *_addresses(mode, tmp, "arep")) as (aendpoint,):
        t = _run(lambda: _rtt_rounds(mode, endpoint, aendpoint, payload, sizes))
    name, raw = f"round trip, {mode}, 1 KB", t["raw"]
    stats = (("p50 µs", lambda a: np.percentile(a, 50)), ("p99 µs", lambda a: np.percentile(a, 99)),
             ("mean µs", np.mean))
    rows = [Row(name, metric, float(fn(t["call"])) / 1e3, float(fn(raw)) / 1e3,
                "raw pyzmq REQ/REP", goal=1.5) for metric, fn in stats]
    # Context, not a goal: the same echo with both ends on asyncio (uvloop + zmq.asyncio).
    rows.append(Row(name, "p50 µs", float(np.percentile(t["call"], 50)) / 1e3,
                    float(np.percentile(t["asyncio"], 50)) / 1e3,
                    "pyzmq zmq.asyncio REQ/REP, both ends"))
    # Context: the blocking caller (as the raw REQ client is), and an actor that does not
    # poll for its next request after answering (what a wake-up per request costs).
    rows += [Row(f"{name}, h.call_sync", metric, float(fn(t["sync"])) / 1e3,
                 float(fn(raw)) / 1e3, "raw pyzmq REQ/REP") for metric, fn in stats[:2]]
    rows.append(Row(f"{name}, actor spin_wait_us=0, await h.call", "p50 µs",
                    float(np.percentile(t["quiet_call"], 50)) / 1e3,
                    float(np.percentile(raw, 50)) / 1e3, "raw pyzmq REQ/REP"))
    return rows


# --- 2. array stream throughput ---

class RawPush:
    """The zero-copy PUSH side of the raw stream; the puller acknowledges each pass."""

    def __init__(self, endpoints: list[str]) -> None:
        self.ctx = zmq.Context()
        self.push = self.ctx.socket(zmq.PUSH)
        self.push.setsockopt(zmq.SNDHWM, STREAM_WINDOW)
        self.ack = self.ctx.socket(zmq.PULL)
        self.push.connect(endpoints[0])
        self.ack.connect(endpoints[1])

    def one_pass(self, arr: np.ndarray, n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            self.push.send_multipart([b"d", arr], copy=False)
        self.push.send(b"end")
        items, nbytes = map(int, self.ack.recv_string().split())
        elapsed = time.perf_counter() - t0
        assert (items, nbytes) == (n, n * arr.nbytes), (items, nbytes)
        return elapsed

    def close(self) -> None:
        self.ctx.destroy(linger=0)


async def _stream_passes(endpoints: list[str], arr: np.ndarray, count: int,
                         sizes: Sizes) -> tuple[list[float], list[float]]:
    from rlmesh.runtime import Job

    from .bench_actors import ConsumeActor

    raw = RawPush(endpoints)
    ours: list[float] = []
    theirs: list[float] = []
    try:
        async with Job("ipc") as job:
            h = await job.spawn(ConsumeActor)
            s = h.stream("consume", window=STREAM_WINDOW)

            async def one_pass(n: int) -> float:
                t0 = time.perf_counter()
                for _ in range(n):
                    await s.send(arr)
                await s.flush()
                return time.perf_counter() - t0

            # Connections, and the receivers' allocators reaching a steady state: the first
            # hundreds of MB run at a fraction of the later rate on both sides.
            warm = max(8, count // 4)
            await _blocking(raw.one_pass, arr, warm)
            await one_pass(warm)
            for _ in range(sizes.stream_passes):  # alternate, so both see the same load
                gc.collect()
                theirs.append(await _blocking(raw.one_pass, arr, count))
                gc.collect()
                ours.append(await one_pass(count))
            items, nbytes = await h.call("totals")
            total = warm + count * sizes.stream_passes
            assert (items, nbytes) == (total, total * arr.nbytes), (items, nbytes)
            s.close()
    finally:
        raw.close()
    return ours, theirs


def bench_stream(mb: int, sizes: Sizes, tmp: Path) -> list[Row]:
    arr = np.ones(mb * (1 << 20) // 4, dtype=np.float32)
    count = max(4, sizes.stream_mb_per_pass // mb)
    with raw_peer("pull", *_addresses("ipc", tmp, "pull", "ack")) as endpoints:
        ours, raw = _run(lambda: _stream_passes(endpoints, arr, count, sizes))
    mbps = lambda t: count * arr.nbytes / (1 << 20) / statistics.median(t)  # noqa: E731
    return [Row(f"array stream, ipc, {mb} MB float32", "MB/s", mbps(ours), mbps(raw),
                "raw pyzmq PUSH/PULL zero-copy", goal=0.8, higher_is_better=True)]


# --- 3. cold start ---

def _bare_interpreters(n: int) -> float:
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", BARE_IMPORTS], start_new_session=NEW_SESSION)
             for _ in range(n)]
    codes = [p.wait() for p in procs]
    elapsed = time.perf_counter() - t0
    assert codes == [0] * n, codes
    return elapsed


async def _cold_rounds(sizes: Sizes) -> dict[str, list[float]]:
    from rlmesh.runtime import Job

    from .bench_actors import EmptyActor

    async def spawn_many(n: int) -> float:
        t0 = time.perf_counter()
        handles = await asyncio.gather(*(job.spawn(EmptyActor) for _ in range(n)))
        elapsed = time.perf_counter() - t0
        await asyncio.gather(*(job.stop_actor(h.name) for h in handles))
        return elapsed

    out: dict[str, list[float]] = {"one": [], "bare_one": [], "many": [], "bare_many": []}
    async with Job("ipc") as job:
        await _blocking(_bare_interpreters, 1)  # warm-up: file caches, first-use costs
        await spawn_many(1)
        for _ in range(sizes.cold_repeats):  # alternate, so both see the same load
            out["bare_one"].append(await _blocking(_bare_interpreters, 1))
            out["one"].append(await spawn_many(1))
        for _ in range(sizes.cold_many_repeats):
            out["bare_many"].append(await _blocking(_bare_interpreters, COLD_MANY))
            out["many"].append(await spawn_many(COLD_MANY))
    return out


def bench_cold_start(sizes: Sizes, tmp: Path) -> list[Row]:
    t = _run(lambda: _cold_rounds(sizes))
    med = statistics.median
    return [
        Row("cold start, 1 actor", "s", med(t["one"]), med(t["bare_one"]),
            f"python -c '{BARE_IMPORTS}'"),
        Row(f"cold start, {COLD_MANY} actors at once", "s", med(t["many"]), med(t["bare_many"]),
            f"{COLD_MANY} of those at once"),
    ]


BENCHMARKS: dict[str, Callable[[Sizes, Path], list[Row]]] = {
    "rtt_ipc": lambda s, t: bench_rtt("ipc", s, t),
    "rtt_tcp": lambda s, t: bench_rtt("tcp", s, t),
    "stream_1mb": lambda s, t: bench_stream(1, s, t),
    "stream_8mb": lambda s, t: bench_stream(8, s, t),
    "cold_start": bench_cold_start,
}


if __name__ == "__main__":
    role, *addresses = sys.argv[1:]
    try:
        {"rep": _serve_rep, "arep": _serve_arep, "pull": _serve_pull}[role](*addresses)
    except KeyboardInterrupt:
        pass
