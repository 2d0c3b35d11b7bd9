"""A live actor in a child process, fed bad input over its real sockets.

Every bad message gets a clear ERROR reply where a reply is possible, is counted, and the
actor goes on serving: a normal call through its handle still works afterwards.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import struct
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import msgpack
import numpy as np
import psutil
import pytest
import uvloop
import zmq
import zmq.asyncio

from rlmesh.runtime import Job
from rlmesh.wire import codec, messages as M

from .fuzz_actors import EchoActor

LIMIT = 1 << 20  # max_message_bytes of the actors under test
REPLY_TIMEOUT = 5.0
pytestmark = pytest.mark.timeout(90)


# --- fixtures and helpers ---

@pytest.fixture(autouse=True)
def children_and_run_dir(runs_root, no_children_left):
    """``runs_root`` (tests/conftest.py) points RLMESH_RUNS_ROOT at a fresh directory under
    the test's tmp dir; on top of its orphan check, no child of ours may be left."""
    assert os.environ["RLMESH_RUNS_ROOT"] == str(runs_root)


def run(coro: Awaitable[Any]) -> Any:
    return uvloop.run(coro)


@dataclass
class Live:
    """A job with one EchoActor process, and raw sockets to poke it with."""

    job: Job
    handle: Any
    zctx: zmq.asyncio.Context

    def dealer(self, address: str | None = None) -> zmq.asyncio.Socket:
        sock = self.zctx.socket(zmq.DEALER)
        sock.linger = 0
        sock.connect(address or self.handle.address)
        return sock

    @property
    def control(self) -> str:
        rec = self.job.run_dir.read_process(self.handle.name)
        assert rec is not None, "the actor's process record is gone"
        return rec.control

    async def stats(self) -> dict[str, int]:
        """The actor server's counters, read over the control plane (STACK)."""
        sock = self.dealer(self.control)
        try:
            await sock.send_multipart(codec.encode(M.make(M.STACK, id=1)))
            reply = await recv(sock)
        finally:
            sock.close()
        assert reply is not None, "control plane did not answer STACK"
        assert reply["t"] == M.STACK_REPLY, reply
        stats = reply["report"]["probes"]["server"]["stats"]
        return {k: stats.get(k, 0) for k in ("messages", "rejected", "calls", "errors")} | stats

    async def still_serves(self) -> None:
        x = {"obs": np.arange(100_000, dtype=np.float32), "t": (1, "a")}  # out-of-band too
        got = await self.handle.call("echo", x, timeout=REPLY_TIMEOUT)
        assert np.array_equal(got["obs"], x["obs"]) and got["t"] == (1, "a")
        assert await self.handle.call("aecho", 7, timeout=REPLY_TIMEOUT) == 7


async def live(mode: str, body: Callable[[Live], Awaitable[None]]) -> None:
    job = Job(mode, max_message_bytes=LIMIT)
    await job.start()
    zctx = zmq.asyncio.Context()
    try:
        handle = await job.spawn(EchoActor, start_timeout=30)
        await body(Live(job, handle, zctx))
    finally:
        await job.shutdown()
        zctx.destroy(linger=0)


async def recv(sock: zmq.asyncio.Socket, timeout: float = REPLY_TIMEOUT) -> dict | None:
    """The next message on ``sock``, validated, or None if none came in time."""
    try:
        frames = await asyncio.wait_for(sock.recv_multipart(copy=False), timeout)
    except asyncio.TimeoutError:
        return None
    return M.validate(codec.decode(frames))


def call(method: str, *args: Any, id: int = 1, **kwargs: Any) -> dict:
    return M.make(M.CALL, id=id, m=method, a=list(args), k=kwargs)


def frames_of(msg: Any, **kw: Any) -> list[bytes]:
    return [bytes(f) for f in codec.encode(msg, **kw)]


def rejected_locally(frames: list[bytes], limits: codec.Limits) -> bool:
    """Whether an actor must reject these frames (what the server decides, computed here)."""
    try:
        msg = M.validate(codec.decode(frames, limits))
    except (codec.DecodeError, M.ProtocolError):
        return True
    return msg["t"] not in (M.CALL, M.TELL, M.STREAM, M.HELLO)


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# --- bad messages, one by one ---

def _random_garbage(seed: int, n: int = 64) -> bytes:
    data = bytes(random.Random(seed).randrange(256) for _ in range(n))
    with pytest.raises(codec.DecodeError):  # precondition: it really is garbage
        codec.decode([data])
    return data


def _scenarios() -> list[tuple[str, list[bytes], Callable[[dict], None]]]:
    """(name, frames sent by a DEALER, check of the ERROR reply).

    Where the header itself can still be read, the reply carries the call's id, so the
    caller's waiting call fails at once instead of timing out."""
    big = np.ones(70_000, dtype=np.float32)  # out of band
    with_array = frames_of(call("echo", big, id=21))
    assert len(with_array) == 2
    header = frames_of(call("echo", [1, 2, 3], "text", id=22))[0]
    wrong_version = call("echo", 1, id=23)
    wrong_version["v"] = M.PROTOCOL_VERSION + 1
    parts = [np.zeros(400_000, dtype=np.uint8) for _ in range(3)]  # 1.2 MB in 400 KB frames

    def err(etype: str, *words: str, id: int | None = None) -> Callable[[dict], None]:
        def check(reply: dict) -> None:
            assert reply["t"] == M.ERROR, reply
            assert reply["etype"] == etype, reply
            assert reply["id"] == id, reply
            for w in words:
                assert w in reply["msg"], (w, reply["msg"])
        return check

    def type_error(reply: dict) -> None:
        err("TypeError", "str", id=26)(reply)
        assert "add" in reply["tb"] and "a + b" in reply["tb"]  # the remote traceback

    return [
        ("random bytes", [_random_garbage(1)], err("ProtocolError", "malformed")),
        ("random frames", [_random_garbage(2), b"", _random_garbage(3, 7)], err("ProtocolError")),
        ("array frame missing", with_array[:1], err("ProtocolError", "frame 0", id=21)),
        ("extra frame", [*with_array, b"stray"], err("ProtocolError", "not referenced", id=21)),
        ("header cut in half", [header[: len(header) // 2]], err("ProtocolError", "malformed")),
        ("empty body", [b""], err("ProtocolError")),
        ("not a map", frames_of([1, 2, 3]), err("ProtocolError", "expected a map")),
        ("unknown method", frames_of(call("nope", id=24)),
         err("UnknownCall", "'nope'", "echo", "aecho", "add", id=24)),
        ("private method", frames_of(call("_private", id=25)), err("UnknownCall", id=25)),
        ("method raises TypeError", frames_of(call("add", "x", 1, id=26)), type_error),
        ("too few arguments", frames_of(call("echo", id=27)),
         err("BadRequest", "missing a required argument: 'x'", id=27)),
        ("too many arguments", frames_of(call("aecho", 1, 2, id=28)),
         err("BadRequest", "too many positional arguments", id=28)),
        ("unknown keyword", frames_of(call("echo", 1, y=2, id=29)),
         err("BadRequest", "'y'", id=29)),
        ("wrong protocol version", frames_of(wrong_version),
         err("VersionMismatch", str(M.PROTOCOL_VERSION + 1), str(M.PROTOCOL_VERSION), id=23)),
        ("args not a list", frames_of({**call("echo", id=30), "a": "x"}),
         err("ProtocolError", "'a'", id=30)),
        ("bool id", frames_of({**call("echo", 1), "id": True}), err("ProtocolError", "'id'")),
        ("a PONG", frames_of(M.make(M.PONG, id=31, status={})),
         err("ProtocolError", "'pong'", id=31)),
        ("an ERROR", frames_of(M.make(M.ERROR, id=32, etype="X", msg="y")),
         err("ProtocolError", "'error'", id=32)),
        ("a STOP on the data plane", frames_of(M.make(M.STOP, id=33)),
         err("ProtocolError", "'stop'", id=33)),
        ("too many frames", [frames_of(call("echo", 1, id=34))[0]] + [b""] * 4096,
         err("ProtocolError", "4097 frames", id=34)),
        ("over the byte limit in frames under it", frames_of(call("echo", parts, id=35)),
         err("ProtocolError", "exceeds the limit", id=35)),
    ]


@pytest.mark.parametrize("mode", ["ipc", "tcp"])
def test_bad_messages_get_error_replies_and_the_actor_serves_on(mode):
    scenarios = _scenarios()

    async def body(a: Live) -> None:
        pid = await a.handle.call("pid")
        before = await a.stats()
        sock = a.dealer()
        await sock.send_multipart(frames_of(M.make(M.HELLO, id=20)))
        hello = await recv(sock)
        assert hello is not None and hello["t"] == M.HELLO_OK  # the raw socket works
        for name, frames, check in scenarios:
            await sock.send_multipart(frames)
            reply = await recv(sock)
            assert reply is not None, f"{name}: no reply"
            try:
                check(reply)
            except AssertionError as exc:
                raise AssertionError(f"{name}: {exc}") from None
            await a.still_serves()
        after = await a.stats()
        n_rejected = sum(1 for n, f, _ in scenarios if rejected_locally(f, a.job.limits))
        assert after["rejected"] - before["rejected"] == n_rejected
        # A STOP on the data plane did not stop the actor; nothing restarted it.
        assert await a.handle.call("pid") == pid and alive(pid)
        sock.close()

    run(live(mode, body))


@pytest.mark.parametrize("mode", ["ipc", "tcp"])
def test_a_frame_over_the_limit_drops_only_that_connection(mode):
    async def body(a: Live) -> None:
        pid = await a.handle.call("pid")
        greedy = a.dealer()
        big = np.zeros(LIMIT + 1, dtype=np.uint8)  # one frame over the limit
        await greedy.send_multipart(frames_of(call("echo", big, id=40)))
        assert await recv(greedy, timeout=1.5) is None  # libzmq drops it; no reply possible
        # Others are served as before, old connections and new ones alike.
        await a.still_serves()
        fresh = a.dealer()
        await fresh.send_multipart(frames_of(call("echo", "hi", id=41)))
        reply = await recv(fresh)
        assert reply is not None and reply["t"] == M.REPLY and reply["r"] == "hi"
        # Just under the limit, in one frame, is fine.
        ok = np.ones(LIMIT - 4096, dtype=np.uint8)
        await fresh.send_multipart(frames_of(call("echo", ok, id=42)))
        reply = await recv(fresh)
        assert reply is not None and reply["t"] == M.REPLY and np.array_equal(reply["r"], ok)
        assert alive(pid)
        greedy.close()
        fresh.close()

    run(live(mode, body))


# --- fuzz ---

def _fuzz_corpus(seed: int, n: int) -> list[list[bytes]]:
    """Random multipart messages, and mutations of valid ones (tensor descriptors are covered by their own tests)."""
    rng = random.Random(seed)
    valid = [
        frames_of(call("echo", np.arange(12, dtype=np.int16).reshape(3, 4), (1, "x"), id=50)),
        frames_of(call("echo", np.ones(20_000, dtype=np.float64), id=51)),  # out of band
        frames_of(call("add", [1], [2], id=52)),
        frames_of(call("aecho", {"k": [1.5, None, b"b"]}, id=53)),
        frames_of(M.make(M.TELL, m="echo", a=[1], k={})),
        frames_of(M.make(M.STREAM, ch=9, seq=0, m="echo", p=[1, 2])),
        frames_of(M.make(M.HELLO, id=54)),
        frames_of(M.make(M.PING, id=55)),
        frames_of(M.make(M.CREDIT, ch=1, n=2)),
    ]
    out: list[list[bytes]] = []
    for _ in range(n):
        roll = rng.random()
        if roll < 0.25:
            out.append([rng.randbytes(rng.choice([0, 1, 3, 16, 100, 600]))
                        for _ in range(rng.randint(1, 4))])
            continue
        frames = list(rng.choice(valid))
        for _ in range(rng.randint(1, 3)):
            i = 0 if rng.random() < 0.8 else rng.randrange(len(frames))
            f = bytearray(frames[i])
            op = rng.choice(["flip", "flip", "flip", "truncate", "insert", "drop", "extra", "swap"])
            if op == "flip" and f:
                for _ in range(rng.randint(1, 3)):
                    f[rng.randrange(len(f))] = rng.randrange(256)
            elif op == "truncate":
                del f[rng.randint(0, len(f)):]
            elif op == "insert":
                j = rng.randint(0, len(f))
                f[j:j] = rng.randbytes(rng.randint(1, 8))
            elif op == "drop" and len(frames) > 1:
                del frames[i]
                continue
            elif op == "extra":
                frames.append(rng.randbytes(rng.randint(0, 32)))
            elif op == "swap" and len(frames) > 1:
                frames.reverse()
                continue
            frames[i] = bytes(f)
        out.append(frames)
    return out


@pytest.mark.parametrize("mode", ["ipc", "tcp"])
def test_fuzzed_messages_are_counted_answered_and_survived(mode):
    seed = int(os.environ.get("RLMESH_FUZZ_SEED", "20240611"))
    corpus = _fuzz_corpus(seed + (mode == "tcp"), 300)

    async def body(a: Live) -> None:
        pid = await a.handle.call("pid")
        before = await a.stats()
        expected = sum(rejected_locally(f, a.job.limits) for f in corpus)
        assert 50 < expected < len(corpus)  # the corpus holds both kinds
        sock = a.dealer()
        refusals = 0
        for i in range(0, len(corpus), 50):  # in batches: never near a high-water mark
            for frames in corpus[i:i + 50]:
                await sock.send_multipart(frames)
            # Refusals are sent inline, in order: all of them come before this HELLO's answer.
            sentinel = 10**9 + i
            await sock.send_multipart(frames_of(M.make(M.HELLO, id=sentinel)))
            while True:
                reply = await recv(sock)
                assert reply is not None, f"seed {seed}: the actor stopped answering"
                assert reply["t"] in (M.ERROR, M.REPLY, M.CREDIT, M.HELLO_OK), reply
                if reply["t"] == M.ERROR and reply["etype"] in ("ProtocolError", "VersionMismatch"):
                    refusals += 1
                if reply["t"] == M.HELLO_OK and reply["id"] == sentinel:
                    break
        after = await a.stats()
        assert after["rejected"] - before["rejected"] == expected, (
            f"seed {seed}: the actor rejected {after['rejected'] - before['rejected']} "
            f"messages, the codec rejects {expected}")
        assert refusals == expected  # each rejected message got an error reply
        assert after["messages"] - before["messages"] >= len(corpus) + len(range(0, len(corpus), 50))
        await a.still_serves()
        assert await a.handle.call("pid") == pid and alive(pid)
        sock.close()

    run(live(mode, body))


# --- raw bytes below ZeroMQ ---

def _zmtp_greeting() -> bytes:
    """A valid ZMTP 3.0 NULL greeting, so the garbage after it reaches the frame decoder."""
    return (b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\x00")
            + b"\x00" + b"\x00" * 31)


def _zmtp_ready() -> bytes:
    prop = b"\x0bSocket-Type" + struct.pack(">I", 6) + b"DEALER"
    body = b"\x05READY" + prop
    return bytes([0x04, len(body)]) + body


def _garbage_streams(rng: random.Random) -> list[bytes]:
    return [
        rng.randbytes(1000),
        b"\x00" * 64,
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        _zmtp_greeting() + rng.randbytes(500),
        _zmtp_greeting() + _zmtp_ready() + b"\x02" + struct.pack(">Q", 1 << 62),  # 4 EiB frame
        _zmtp_greeting() + _zmtp_ready() + b"\x00\x05hello" + rng.randbytes(300),
        _zmtp_greeting()[:30],
    ]


@pytest.mark.parametrize("mode", ["ipc", "tcp"])
def test_raw_socket_garbage_does_not_kill_the_actor(mode):
    def connect(address: str) -> socket.socket:
        if address.startswith("tcp://"):
            host, port = address[len("tcp://"):].rsplit(":", 1)
            return socket.create_connection((host, int(port)), timeout=2)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(2)
        s.connect(address[len("ipc://"):])
        return s

    async def body(a: Live) -> None:
        pid = await a.handle.call("pid")
        rng = random.Random(5)
        for target in (a.handle.address, a.control):
            for data in _garbage_streams(rng):
                s = await asyncio.to_thread(connect, target)
                try:
                    await asyncio.to_thread(s.sendall, data)
                    await asyncio.sleep(0.02)
                except OSError:
                    pass  # libzmq may hang up on us first: that is its right
                finally:
                    s.close()
        await asyncio.sleep(0.2)
        await a.still_serves()
        assert (await a.stats())["messages"] > 0  # the control plane answers too
        assert alive(pid) and await a.handle.call("pid") == pid

    run(live(mode, body))


# --- known bugs: each one a message that should get an error reply and does not ---

def _nested_tuple_bomb(depth: int = 300) -> bytes:
    inner = msgpack.packb([])
    for _ in range(depth):
        inner = msgpack.packb([msgpack.ExtType(5, inner)])
    return msgpack.packb(msgpack.ExtType(5, inner))


def _tensor_shape_overflow() -> bytes:
    meta = msgpack.packb(["uint8", [2**63 - 1, 2**63 - 1], b"\0"], use_bin_type=True)
    return msgpack.packb(call("echo", msgpack.ExtType(4, meta), id=60), use_bin_type=True)


async def _expect_refusal_then_service(a: Live, frames: list[bytes]) -> None:
    pid = await a.handle.call("pid")
    sock = a.dealer()
    await sock.send_multipart(frames)
    reply = await recv(sock, timeout=3)
    assert reply is not None and reply["t"] == M.ERROR and reply["etype"] == "ProtocolError", reply
    # The same peer is still served.
    await sock.send_multipart(frames_of(call("echo", "after", id=61)))
    reply = await recv(sock, timeout=3)
    assert reply is not None and reply.get("r") == "after", reply
    assert alive(pid)
    sock.close()


def test_nested_tuple_bomb_gets_an_error_reply():
    run(live("ipc", lambda a: _expect_refusal_then_service(a, [_nested_tuple_bomb()])))


def test_tensor_shape_overflow_gets_an_error_reply_and_the_peer_is_served_on():
    run(live("ipc", lambda a: _expect_refusal_then_service(a, [_tensor_shape_overflow()])))


def test_unsendable_result_gets_an_encode_error_reply():
    from rlmesh.runtime import RemoteError

    async def body(a: Live) -> None:
        with pytest.raises(RemoteError) as info:
            await a.handle.call("unsendable", timeout=3)
        assert info.value.etype == "EncodeError"
        await a.still_serves()

    run(live("ipc", body))
