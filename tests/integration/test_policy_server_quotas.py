"""Clients that would starve the others at a policy server (issue 48, points 3 and 6): idle
authenticated connections that filled the server's descriptors, a client flooding fake
episodes that became every reported episode, and one huge reward that ended a run. Real
policy server processes, real sockets on 127.0.0.1; behaviour is asserted, never times."""

from __future__ import annotations

import resource

import msgpack
import pytest
import zmq

from rlmesh.client import PolicyClient, curve_client_options
from rlmesh.client.keys import default_keys_dir
from rlmesh.wire import messages as M

from .test_policy_client import play_episode, runner_process

pytestmark = pytest.mark.timeout(240)


def idle_crowd(address: str, n: int) -> tuple[list[zmq.Context], list[zmq.Socket]]:
    """``n`` DEALERs holding the admitted client key, each sending one valid call at once
    and then nothing; shed ones reconnect, as ZeroMQ does by default."""
    options = curve_client_options(default_keys_dir())
    contexts = [zmq.Context() for _ in range(n // 800 + 1)]
    for ctx in contexts:
        ctx.max_sockets = 1000
    crowd = []
    for i in range(n):
        sock = contexts[i // 800].socket(zmq.DEALER)
        sock.linger = 0
        sock.curve_serverkey = options["curve_server_key"]
        sock.curve_publickey, sock.curve_secretkey = options["curve_keypair"]
        sock.connect(address)
        sock.send_multipart([msgpack.packb(M.make(M.CALL, id=1, m="server_info", a=[], k={}))])
        crowd.append(sock)
    return contexts, crowd


def test_idle_authenticated_clients_leave_a_new_client_a_slot():
    """1,000 keyed DEALERs that each sent one call, under a soft limit of 512 descriptors:
    the server sat at 512 (connections it had shed were forgotten but left open when a
    dup of their descriptor failed there), its listener could not accept, and a new
    PolicyClient got PolicyServerUnavailable within 10 s."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2400:  # 1,000 zmq sockets here, two descriptors each
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < 2400:
        pytest.skip("this machine allows fewer than 2,400 open files")
    with runner_process() as (run, runner, address):
        pid = run(runner.call("pid"))
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (512, resource.prlimit(pid, resource.RLIMIT_NOFILE)[1]))
        contexts, crowd = idle_crowd(address, 1000)
        try:
            crowd[-1].poll(5000)  # the crowd connected and (partly) answered
            with PolicyClient(address, timeout=10) as newcomer:
                assert play_episode(newcomer)[1]
            connections = run(runner.call("metrics"))["connections"]
            assert connections["shed"] > 0 and connections["open"] <= 512 - 64
        finally:
            for sock in crowd:
                sock.close()
            for ctx in contexts:
                ctx.term()
