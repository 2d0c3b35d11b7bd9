"""The cost of CURVE: the same rlmesh streams and calls over tcp on 127.0.0.1, plain and with
the cluster's keys in use, taking turns in one run. No goal: the ratio documents the cost.

Each side is a driver process of this module (``python -m tests.benchmarks.bench_curve
driver``) holding a ``Job("tcp")`` with a ConsumeActor and an EchoActor; the CURVE side gets
``$RLMESH_CURVE_DIR``, as a node's processes do, and its actors inherit it. Both drivers stay
up for the whole benchmark and are asked for one pass at a time, alternately, so both see the
same background load and the same warm state. This process never takes the keys itself.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from . import children
from .bench_runtime import NEW_SESSION, ROOT, ROUNDS, STREAM_WINDOW, Row

PAYLOAD = bytes(range(256)) * 4  # 1 KB, as bench_runtime's round trip
PEER = "the same, plain tcp"


@dataclass(frozen=True)
class Sizes:
    """How much work each benchmark does on each side; ``quick`` trades precision for time."""

    rtt_warmup: int
    rtt_iters: int  # split into ROUNDS turns
    stream_mb_per_pass: int  # megabytes sent per timed pass
    stream_passes: int  # timed passes per side; the median is reported


DEFAULT = Sizes(rtt_warmup=1000, rtt_iters=10000, stream_mb_per_pass=1024, stream_passes=4)
QUICK = Sizes(rtt_warmup=300, rtt_iters=2000, stream_mb_per_pass=256, stream_passes=2)


# --- the driver process: one side (plain or CURVE) ---

def _answers_plain(address: str, wait_ms: int) -> bool:
    """Whether the actor at ``address`` answers a HELLO from a socket without CURVE."""
    import zmq

    from rlmesh.wire import codec, messages as M

    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(address)
    try:
        sock.send_multipart(codec.encode(M.make(M.HELLO, id=1)))
        return bool(sock.poll(wait_ms))
    finally:
        sock.close()
        ctx.term()


async def _timed_calls(h: Any, n: int) -> list[int]:
    clock = time.perf_counter_ns
    times = [0] * n
    reply = b""
    for i in range(n):
        t0 = clock()
        reply = await h.call("echo", PAYLOAD)
        times[i] = clock() - t0
    assert reply == PAYLOAD, "echo returned something else"
    return times


async def _drive() -> None:
    """Serve ``stream MB COUNT`` and ``rtt N`` lines from stdin, one JSON line each, until
    EOF; every actor is stopped on the way out (``async with Job``)."""
    from rlmesh.runtime import Job
    from rlmesh.wire.security import cluster_keys

    from .bench_actors import ConsumeActor, EchoActor

    loop = asyncio.get_running_loop()
    curve = cluster_keys() is not None
    async with Job("tcp") as job:
        consumer = await job.spawn(ConsumeActor, name="consume")
        echo = await job.spawn(EchoActor, name="echo")
        for h in (consumer, echo):  # what is measured is what the row says it is
            plain = await loop.run_in_executor(None, _answers_plain, h.address,
                                               1000 if curve else 10000)
            if not h.address.startswith("tcp://") or plain == curve:
                raise RuntimeError(f"{h.address}: expected {'CURVE' if curve else 'plain'} tcp")
        pids = [job.supervisor.children[n].child.pid for n in ("consume", "echo")]
        print(json.dumps({"curve": curve, "pids": pids}), flush=True)
        stream = consumer.stream("consume", window=STREAM_WINDOW)
        arrays: dict[int, np.ndarray] = {}
        items = nbytes = 0
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            command, *args = line.split()
            gc.collect()
            if command == "rtt":
                reply: Any = await _timed_calls(echo, int(args[0]))
            elif command == "stream":
                mb, count = map(int, args)
                arr = arrays.setdefault(mb, np.ones(mb * (1 << 20) // 4, dtype=np.float32))
                t0 = time.perf_counter()
                for _ in range(count):
                    await stream.send(arr)
                await stream.flush()
                reply = time.perf_counter() - t0
                items, nbytes = items + count, nbytes + count * arr.nbytes
                assert await consumer.call("totals") == [items, nbytes], "items went missing"
            else:
                raise ValueError(f"unknown command {line!r}")
            print(json.dumps(reply), flush=True)
        stream.close()


class Driver:
    """One side's driver process, in a session of its own like the actors it spawns."""

    def __init__(self, keys_dir: Path | None) -> None:
        from rlmesh.wire.security import ENV_CURVE_DIR

        env = {k: v for k, v in os.environ.items() if k != ENV_CURVE_DIR}
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
        if keys_dir is not None:
            env[ENV_CURVE_DIR] = str(keys_dir)
        self.side = "CURVE" if keys_dir else "plain"
        self.proc = children.popen([sys.executable, "-m", __name__, "driver"], cwd=ROOT,
                                     env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, start_new_session=NEW_SESSION)
        self.pids: list[int] = []
        ready = self._read("starting")
        assert ready["curve"] == (keys_dir is not None), ready
        self.pids = ready["pids"]

    def _read(self, what: str) -> Any:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.side} driver exited with code {self.proc.wait(10)} "
                               f"before {what}")
        return json.loads(line)

    def ask(self, *words: Any) -> Any:
        assert self.proc.stdin is not None
        self.proc.stdin.write(" ".join(map(str, words)) + "\n")
        self.proc.stdin.flush()
        return self._read(" ".join(map(str, words)))

    def close(self) -> None:
        """EOF on stdin: the driver's Job stops its actors and it exits. SIGKILL only if it
        does not; its actors, no longer our descendants then, are checked by pid."""
        import psutil

        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        left = []
        for pid in self.pids:
            try:
                p = psutil.Process(pid)
                p.wait(5)  # the lifeline ends them soon after a killed driver
            except psutil.NoSuchProcess:
                continue
            except psutil.TimeoutExpired:
                p.kill()
                left.append(pid)
        if left:
            raise RuntimeError(f"{self.side} driver left actor processes {left} running "
                               "(killed now)")


def _with_drivers(tmp: Path, fn: Callable[[Driver, Driver], Any]) -> Any:
    from rlmesh.wire.security import make_cluster_keys

    keys = make_cluster_keys(tmp / "curve-keys").directory
    started: list[Driver] = []
    try:
        started.append(Driver(None))
        started.append(Driver(keys))
        return fn(*started)
    finally:
        errors = []
        for d in started:
            try:
                d.close()
            except RuntimeError as exc:
                errors.append(str(exc))
        if errors:
            raise RuntimeError("; ".join(errors))


# --- the benchmarks ---

def bench_stream(mb: int, sizes: Sizes, tmp: Path) -> list[Row]:
    count = max(4, sizes.stream_mb_per_pass // mb)

    def turns(plain: Driver, curve: Driver) -> tuple[list[float], list[float]]:
        # Connections, and the receivers' allocators reaching a steady state (bench_runtime).
        warm = max(8, count // 4)
        plain.ask("stream", mb, warm)
        curve.ask("stream", mb, warm)
        times: tuple[list[float], list[float]] = ([], [])
        for _ in range(sizes.stream_passes):  # alternate, so both see the same load
            times[0].append(plain.ask("stream", mb, count))
            times[1].append(curve.ask("stream", mb, count))
        return times

    plain, curve = _with_drivers(tmp, turns)
    mbps = lambda t: count * mb / statistics.median(t)  # noqa: E731
    rows = [Row(f"array stream, tcp + CURVE, {mb} MB float32", "MB/s", mbps(curve), mbps(plain),
                PEER, higher_is_better=True)]
    print_markdown(rows)
    return rows


def bench_rtt(sizes: Sizes, tmp: Path) -> list[Row]:
    def turns(plain: Driver, curve: Driver) -> tuple[np.ndarray, np.ndarray]:
        plain.ask("rtt", sizes.rtt_warmup)
        curve.ask("rtt", sizes.rtt_warmup)
        times: tuple[list[list[int]], list[list[int]]] = ([], [])
        n = sizes.rtt_iters // ROUNDS
        for _ in range(ROUNDS):  # alternate, so both see the same load
            times[0].append(plain.ask("rtt", n))
            times[1].append(curve.ask("rtt", n))
        return np.concatenate(times[0]), np.concatenate(times[1])

    plain, curve = _with_drivers(tmp, turns)
    bench = "round trip, tcp + CURVE, 1 KB"
    rows = [Row(bench, f"p{q} µs", float(np.percentile(curve, q)) / 1e3,
                float(np.percentile(plain, q)) / 1e3, PEER) for q in (50, 99)]
    print_markdown(rows)
    return rows


def print_markdown(rows: list[Row]) -> None:
    """The rows as docs/benchmark_log.md's CURVE table has them: plain, CURVE, the ratio."""
    from .run import _fmt

    print("| benchmark | metric | plain tcp | tcp + CURVE | CURVE/plain |")
    print("|---|---|---:|---:|---:|")
    for r in rows:
        bench = r.bench.replace("tcp + CURVE", "tcp")
        print(f"| {bench} | {r.metric} | {_fmt(r.reference)} | {_fmt(r.rlmesh)} "
              f"| {r.ratio:.2f}x |", flush=True)


BENCHMARKS: dict[str, Callable[[Sizes, Path], list[Row]]] = {
    "curve_stream_1mb": lambda s, t: bench_stream(1, s, t),
    "curve_stream_8mb": lambda s, t: bench_stream(8, s, t),
    "curve_rtt": bench_rtt,
}


if __name__ == "__main__":
    if sys.argv[1:] != ["driver"]:
        raise SystemExit("usage: python -m tests.benchmarks.bench_curve driver "
                         "(tests.benchmarks.run --only curve runs the benchmarks)")
    import uvloop

    uvloop.run(_drive())
