"""CURVE on tcp: with the cluster's keys, actors and their control threads accept only peers
that hold the keys; a process without them cannot call, inject messages or take stacks."""

from __future__ import annotations

import asyncio
import os

import pytest
import zmq

from rlmesh.runtime import Job
from rlmesh.wire import codec, messages as M
from rlmesh.wire.security import ENV_CURVE_DIR, ClusterKeys, make_cluster_keys, use_keys


@pytest.fixture
def cluster_keys(tmp_path):
    saved = os.environ.get(ENV_CURVE_DIR)
    keys = make_cluster_keys(tmp_path / "keys")
    use_keys(keys)
    yield keys
    use_keys(None)
    if saved is not None:
        os.environ[ENV_CURVE_DIR] = saved


def answers(address: str, **curve: bytes) -> bool:
    """Whether a HELLO over a fresh DEALER, CURVE-configured as given, gets a reply."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    for option, value in curve.items():
        setattr(sock, option, value)
    sock.connect(address)
    try:
        sock.send_multipart(codec.encode(M.make(M.HELLO, id=1)))
        return bool(sock.poll(1500))
    finally:
        sock.close()
        ctx.term()


def test_only_holders_of_the_cluster_keys_reach_actors_over_tcp(cluster_keys, tmp_path):
    address, control = asyncio.run(scenario_with_checks())
    assert address.startswith("tcp://127.0.0.1:")


async def scenario_with_checks():
    async with Job("tcp") as job:
        handle = await job.spawn("tests.integration.runtime_actors:Counter", start=5, name="c")
        assert await handle.call("inc", 2) == 7
        child = job.supervisor.children["c"].child
        keys_dir = os.environ[ENV_CURVE_DIR]
        loop = asyncio.get_running_loop()
        stranger = zmq.curve_keypair()
        for target in (handle.address, child.record.control):
            # no CURVE at all; a stranger's key pair that knows the server key; the holder
            assert not await loop.run_in_executor(None, lambda: answers(target))
            keys = ClusterKeys.load(keys_dir)
            assert not await loop.run_in_executor(None, lambda: answers(
                target, curve_serverkey=keys.public, curve_publickey=stranger[0],
                curve_secretkey=stranger[1]))
            assert await loop.run_in_executor(None, lambda: answers(
                target, curve_serverkey=keys.public, curve_publickey=keys.public,
                curve_secretkey=keys.secret))
        assert await handle.call("get") == 7  # the actor served on through all of it
        return handle.address, child.record.control


def test_a_new_pair_copied_over_the_old_one_is_the_pair_admitted(tmp_path):
    """A node's key folder gets a new pair when a head with another state folder launches the
    same cluster: a server started there admits the new key, not the one the old pair left in
    its allowed/ folder (an agent that refused its own head's key did not answer it)."""
    import shutil

    from rlmesh.wire.security import PUBLIC, SECRET

    node = tmp_path / "node-keys"
    make_cluster_keys(node)
    ctx = zmq.Context()
    old = ClusterKeys.load(node)
    server = ctx.socket(zmq.ROUTER)
    use_keys(old)
    try:
        from rlmesh.wire.security import release, secure_server

        secure_server(server, "tcp://127.0.0.1:0")  # the old pair's allowed/ copy is made
        server.close(0)
        release(ctx)
        fresh = make_cluster_keys(tmp_path / "head-keys")
        for name in (PUBLIC, SECRET):
            shutil.copy(fresh.directory / name, node / name)
        ctx2 = zmq.Context()
        new = ClusterKeys.load(node)
        use_keys(new)
        server = ctx2.socket(zmq.ROUTER)
        secure_server(server, "tcp://127.0.0.1:0")
        port = server.bind_to_random_port("tcp://127.0.0.1")
        reply = answers(f"tcp://127.0.0.1:{port}", curve_serverkey=new.public,
                        curve_publickey=new.public, curve_secretkey=new.secret)
        # Nothing serves HELLO on a bare ROUTER: what matters is that the handshake passed,
        # so the message reached it.
        assert not reply
        assert server.poll(2000), "the new pair's client was refused by the ZAP handler"
        assert (node / "allowed" / PUBLIC).read_bytes() == (node / PUBLIC).read_bytes()
        server.close(0)
        release(ctx2)
        ctx2.term()
    finally:
        use_keys(None)
        ctx.term()
