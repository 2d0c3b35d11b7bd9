"""`rlmesh demo`: the runtime at work, until the PPO issue brings a real training job.

Producer processes stream array "fragments" to a sink over credit-bounded channels and
bump a named counter; one producer is killed half-way and the supervisor restarts it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from typing import Any

import numpy as np

from rlmesh.runtime import Actor, ActorUnavailable, Job, RestartPolicy
from rlmesh.runtime.protocol import Protocol

FRAGMENT_SHAPE = (256, 1024)  # 1 MiB of float32, like a large rollout fragment


class Sink(Actor):
    """Receives fragments; stands in for an aggregator or a learner."""

    protocol = Protocol(streams=("fragment",), calls=("totals",))

    def __init__(self) -> None:
        self.fragments = 0
        self.nbytes = 0

    def fragment(self, batch: dict[str, Any]) -> None:
        self.fragments += 1
        self.nbytes += batch["obs"].nbytes

    def totals(self) -> list[int]:
        return [self.fragments, self.nbytes]


class Counter(Actor):
    """A named actor every process of the job can reach."""

    protocol = Protocol(tells=("inc",), calls=("get",))

    def __init__(self) -> None:
        self.n = 0

    def inc(self, k: int = 1) -> None:
        self.n += k

    def get(self) -> int:
        return self.n


class Producer(Actor):
    """Streams fragments to the sink until the deadline."""

    protocol = Protocol(calls=("run", "pid"))  # the demo kills it by its pid

    async def run(self, until: float) -> int:
        sink = await self.job.get_actor("sink")
        counter = await self.job.get_actor("counter")
        stream = sink.stream("fragment", window=4)
        rng = np.random.default_rng(os.getpid())
        obs = rng.standard_normal(FRAGMENT_SHAPE, dtype=np.float32)
        sent = 0
        while time.time() < until:
            await stream.send({"obs": obs, "producer": self.name, "seq": sent})
            await counter.tell("inc", 1)
            sent += 1
        await stream.flush()
        return sent

    def pid(self) -> int:
        return os.getpid()


async def _drive(producer: Any, until: float) -> None:
    """Keep a producer running until the deadline, across its restarts."""
    while time.time() < until:
        try:
            await producer.call("run", until, timeout=None)
        except ActorUnavailable:
            await asyncio.sleep(0.2)  # it died; the supervisor is bringing it back


async def demo(actors: int, seconds: float, mode: str) -> int:
    logging.getLogger("rlmesh.runtime.supervisor").setLevel(logging.ERROR)  # we print events
    print(f"rlmesh demo: {actors} producer actors, {seconds:.0f} s, transport {mode}")
    started = time.monotonic()
    async with Job(mode, heartbeat_timeout=3.0) as job:
        job.supervisor.listeners.append(
            lambda e: print(f"  [supervisor] {e.name} {e.kind}: {e.detail.splitlines()[0]}"))
        sink = await job.spawn(Sink, name="sink")
        counter = await job.spawn(Counter, name="counter")
        producers = await asyncio.gather(*(
            job.spawn(Producer, name=f"producer-{i}", restart=RestartPolicy(max_restarts=3))
            for i in range(actors)))
        print(f"  {actors + 2} actor processes ready in {time.monotonic() - started:.2f} s "
              f"(job {job.job_id}; try `rlmesh stack` in another terminal)")
        until = time.time() + seconds
        drivers = [asyncio.ensure_future(_drive(p, until)) for p in producers]
        killed = False
        last = (0, 0, time.monotonic())
        while time.time() < until:
            await asyncio.sleep(1.0)
            frags, nbytes = await sink.call("totals")
            now = time.monotonic()
            rate = (nbytes - last[1]) / (now - last[2]) / 2**20
            print(f"  t={now - started:5.1f}s fragments={frags:7d} {rate:8.1f} MiB/s "
                  f"counter={await counter.call('get')}")
            last = (frags, nbytes, now)
            if not killed and time.time() > until - seconds / 2 and mode != "inproc":
                victim = producers[0]
                print(f"  killing {victim.name} (pid {await victim.call('pid')}) to show supervision")
                os.kill(await victim.call("pid"), signal.SIGKILL)
                killed = True
        await asyncio.gather(*drivers)
        frags, nbytes = await sink.call("totals")
        total = await counter.call("get")
    print(f"done: {frags} fragments ({nbytes / 2**30:.2f} GiB) streamed, "
          f"counter={total}, every actor process stopped")
    return 0


def main(args: Any) -> int:
    import uvloop

    return uvloop.run(demo(args.actors, args.seconds, args.mode))
