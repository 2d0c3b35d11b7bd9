"""Attacks on memory, descriptors and logs over loopback (issue 15, point 5): oversized
messages and headers at a policy server, frames of refused calls held until a GC, idle
connections crowding out clients, and a failing tell logging without limit."""

from __future__ import annotations

import asyncio
import socket

import msgpack
import numpy as np
import psutil
import pytest
import uvloop
import zmq
import zmq.asyncio

from rlmesh.client import PolicyClient, curve_client_options
from rlmesh.client.keys import default_keys_dir
from rlmesh.runtime import Job
from rlmesh.wire import codec, messages as M

from .fuzz_actors import EchoActor
from .test_policy_client import play_episode, runner_process

pytestmark = pytest.mark.timeout(180)


def curve_dealer(address: str) -> zmq.Socket:
    """A raw socket holding the client keys a tcp policy server admits."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.linger = 0
    options = curve_client_options(default_keys_dir())
    sock.curve_serverkey = options["curve_server_key"]
    sock.curve_publickey, sock.curve_secretkey = options["curve_keypair"]
    sock.connect(address)
    return sock


def reply(sock: zmq.Socket, timeout_s: float = 5.0) -> dict | None:
    return codec.decode(sock.recv_multipart()) if sock.poll(timeout_s * 1000) else None


def test_a_policy_server_refuses_big_messages_and_headers_and_serves_on():
    """Its limit was 1 GiB, and a 16 MB header of empty maps took 1.2 GB to decode."""
    with runner_process() as (run, runner, address):
        sock = curve_dealer(address)
        eid = PolicyClient(address).start_episode()
        big = M.make(M.CALL, id=1, m="get_action", a=[eid, np.zeros((64, 1 << 18), np.float32)], k={})
        sock.send_multipart(codec.encode(big))  # 64 MiB: the connection is dropped, no reply
        assert reply(sock, 3.0) is None
        sock.close()
        sock = curve_dealer(address)
        header = msgpack.packb({"v": 1, "t": "call", "id": 2, "m": "get_action",
                                "a": [eid, [{}] * (2 << 20)], "k": {}})
        sock.send_multipart([header])
        got = reply(sock)
        sock.close()
        with PolicyClient(address) as client:
            assert play_episode(client)[1]
    assert got is not None and got["etype"] == "ProtocolError" and "exceeds" in got["msg"], got


async def _rss_after_refused_calls(n: int, mb: int) -> tuple[int, int]:
    async with Job("ipc") as job:
        actor = await job.spawn(EchoActor, start_timeout=30)
        proc = psutil.Process(await actor.call("pid"))
        before = proc.memory_info().rss
        ctx = zmq.asyncio.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.linger = 0
        sock.connect(actor.address)
        try:
            big = np.ones(mb << 18, np.float32)  # mb MiB
            for i in range(n):  # add(a, b) called with three arguments: refused
                await sock.send_multipart(codec.encode(M.make(M.CALL, id=i, m="add",
                                                              a=[big, 1, 2], k={})))
                got = codec.decode(await asyncio.wait_for(sock.recv_multipart(), 30))
                assert got["etype"] == "BadRequest", got
            await asyncio.sleep(0.5)
            return before, proc.memory_info().rss
        finally:
            sock.close()
            ctx.destroy(linger=0)


def test_frames_of_refused_calls_are_freed_at_once():
    """Three 600 MB calls with bad arguments took RSS from 358 MB to 2.2 GB until a GC."""
    before, after = uvloop.run(_rss_after_refused_calls(4, 100))
    assert after - before < 150 << 20, f"RSS {before >> 20} MB -> {after >> 20} MB"


def test_idle_connections_past_the_cap_are_closed_and_a_client_gets_in():
    """1,078 idle TCP connections locked an authorised client out for ~30 s."""
    with runner_process(policy_server_max_connections=20) as (run, runner, address):
        host, port = address.removeprefix("tcp://").rsplit(":", 1)
        idle = [socket.create_connection((host, int(port))) for _ in range(60)]

        def closed_by_server() -> int:
            shut = 0
            for s in idle:
                s.setblocking(False)
                try:
                    while s.recv(4096):  # the server's greeting, then EOF if it closed
                        pass
                    shut += 1
                except BlockingIOError:
                    pass
                except OSError:
                    shut += 1
            return shut

        run(asyncio.sleep(1.0))  # the server's loop sees the connections arrive
        shed = closed_by_server()
        with PolicyClient(address, timeout=5) as client:
            assert play_episode(client)[1]
        for s in idle:
            s.close()
    # 32: the places past the cap new connections may wait in until their first valid
    # message (ConnectionGuard's slack), so that a new client can take a busy one's slot
    assert shed >= 60 - 20 - 32, f"only {shed} of 60 idle connections were closed (cap 20)"


async def _log_after_failing_tells(n: int) -> tuple[int, str]:
    async with Job("ipc") as job:
        actor = await job.spawn(EchoActor, start_timeout=30)
        for _ in range(n):
            await actor.tell("add", "x", 1)  # TypeError in the method: a traceback each time
        assert await actor.call("echo", 1, timeout=30) == 1  # after every tell
        log_path = job.run_dir.log_path(actor.name)
        text = log_path.read_text()
    return len(text), text


def test_a_failing_tell_does_not_flood_the_log():
    """A failing 56-byte tell logged 1.2 KB of traceback each time, without limit."""
    size, text = uvloop.run(_log_after_failing_tells(3000))
    assert size < 30_000, f"{size} bytes of log for 3,000 failing tells"
    assert text.count("Traceback") <= 1 and "failed" in text
