"""SpinWait (poll a socket a while before sleeping) and AsyncSocket's use of it, over real
zmq sockets: it sees what arrives, gives up when spinning does not pay and probes again,
and a spinning server still answers in order without starving its event loop."""

from __future__ import annotations

import asyncio
import threading

import pytest
import uvloop
import zmq

from rlmesh.wire.sockets import AsyncSocket, SpinWait


@pytest.fixture
def pair():
    ctx = zmq.Context()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    a.bind("inproc://spin-test")
    b.connect("inproc://spin-test")
    yield a, b
    ctx.destroy(linger=0)


def test_budget_zero_never_spins_and_a_negative_budget_is_refused(pair):
    a, b = pair
    b.send(b"x")
    spin = SpinWait(0.0)
    assert spin.wait(a) is False and spin.spins == 0  # the caller sleeps in poll instead
    with pytest.raises(ValueError, match="spin budget must be >= 0"):
        SpinWait(-1e-6)


def test_a_waiting_message_is_seen(pair):
    a, b = pair
    spin = SpinWait(1.0)
    b.send(b"x")
    assert spin.wait(a) is True and (spin.spins, spin.hits, spin.misses) == (1, 1, 0)
    assert a.recv() == b"x"


def test_a_message_sent_during_the_spin_is_seen(pair):
    a, b = pair
    spin = SpinWait(5.0)
    timer = threading.Timer(0.02, b.send, (b"late",))
    timer.start()
    try:
        assert spin.wait(a) is True
    finally:
        timer.join()
    assert a.recv() == b"late"


def test_spinning_stops_after_misses_in_a_row_and_a_probe_turns_it_back_on(pair):
    a, b = pair
    spin = SpinWait(1e-4)
    for _ in range(SpinWait.GIVE_UP):
        assert spin.wait(a) is False
    assert (spin.spins, spin.misses) == (SpinWait.GIVE_UP, SpinWait.GIVE_UP)
    # Given up: waits return at once, without polling, until the probe.
    b.send(b"x")
    for _ in range(SpinWait.PROBE):
        assert spin.wait(a) is False
    assert spin.spins == SpinWait.GIVE_UP
    assert spin.wait(a) is True  # the probe finds the message: spinning is back on
    assert (spin.spins, spin.hits, spin.misses) == (SpinWait.GIVE_UP + 1, 1, 0)
    assert spin.wait(a) is True  # no skipping now


def test_a_spinning_server_answers_in_order_and_its_loop_still_runs_other_work():
    """A client keeps the server's socket busy, so every spin finds the next request; the
    loop's timer still fires between batches, and every request is answered in order."""
    requests = 3000
    ticks = []
    answers = []

    async def main():
        ctx = zmq.Context()
        router = ctx.socket(zmq.ROUTER)
        port = router.bind_to_random_port("tcp://127.0.0.1")
        server = None

        def on_message(frames):
            server.send_nowait([frames[0], frames[1].bytes])

        server = AsyncSocket(router, on_message, spin_wait=0.05)

        def client():
            dealer = ctx.socket(zmq.DEALER)
            dealer.connect(f"tcp://127.0.0.1:{port}")
            for i in range(requests):
                dealer.send(str(i).encode())
                answers.append(int(dealer.recv()))
            dealer.close(0)

        async def ticker():
            while True:
                await asyncio.sleep(0.001)
                ticks.append(1)

        tick_task = asyncio.ensure_future(ticker())
        await asyncio.get_running_loop().run_in_executor(None, client)
        tick_task.cancel()
        spins, hits = server.spin.spins, server.spin.hits
        server.close()
        ctx.destroy(linger=0)
        return spins, hits

    spins, hits = uvloop.run(main())
    assert answers == list(range(requests))
    assert hits > 0 and spins >= hits  # it spun, and spins found requests
    assert ticks  # the loop was not starved while the socket kept it busy


def test_an_actor_polls_after_answering_a_call_but_not_after_streamed_items_or_tells(tmp_path):
    """The default of an actor process (``Actor.spin_wait_us``): a call's reply arms one
    poll for the next request; stream items, tells and their credits do not."""
    from rlmesh.runtime.actor import Actor, ActorServer, spin_wait_of
    from rlmesh.wire import codec, messages as M

    class Echo(Actor):
        def echo(self, x):
            return x

        def take(self, x):
            pass

    async def main():
        actor = Echo()
        assert spin_wait_of(actor) == 300e-6  # the default
        server = ActorServer(actor, "echo")
        address = await server.start(f"ipc://{tmp_path}/echo", spin_wait=0.002)
        ctx = zmq.Context()
        client = ctx.socket(zmq.DEALER)
        client.connect(address)
        loop = asyncio.get_running_loop()

        async def exchange(msg, replies):
            client.send_multipart(codec.encode(msg))
            got = []
            for _ in range(replies):
                got.append(await loop.run_in_executor(None, client.recv_multipart))
            await asyncio.sleep(0.05)  # the server finishes its turn (and any poll)
            return got

        try:
            for i in range(3):
                await exchange(M.make(M.STREAM, ch=1, seq=i, m="take", p=i), 1)  # a credit
            await exchange(M.make(M.TELL, m="take", a=[1], k={}), 0)
            assert server.spin_counts()["spins"] == 0
            reply = await exchange(M.make(M.CALL, id=7, m="echo", a=[5], k={}), 1)
            assert codec.decode(reply[0])["r"] == 5
            assert server.spin_counts() == {"spins": 1, "spin_hits": 0}
            await exchange(M.make(M.TELL, m="take", a=[1], k={}), 0)  # not armed again
            assert server.spin_counts()["spins"] == 1
        finally:
            server.close()
            ctx.destroy(linger=0)

    uvloop.run(main())
