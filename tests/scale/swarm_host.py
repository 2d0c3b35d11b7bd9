"""One process of the swarm: a ``SwarmHost`` actor that serves K simulated runners (``SimRunner``).

A real env runner is one process; a thousand of them would spend the swarm's two cores on
Python start-up and env stepping, and measure those instead of the control plane. A sim is
what the control plane sees of a runner and nothing else: an actor with its own socket and
its own name (``env_runner-<i>``, served in-process by the host's job, so the param server and
relays reach it by name as they reach a real runner), that

- takes its weights with the real runner's code (``VersionedPolicies``, the mixin every env
  runner uses: subscribe to its node's relay, else the param server; the first push awaited;
  pushes kept to the next fragment boundary; the fallback left when the relay is back), with
  a policy that loads nothing: the arrays are dropped as they arrive and the wall time
  (``time.time()``: every namespace node is this machine, one clock) at which it first held
  each version is noted;
- streams fragments of a chosen size at a chosen rate to its aggregator with
  ``stream("add_fragment", window)``: fragments the real ``BatchBuilder`` accepts (time-major
  ``[T, 1, ...]`` columns, a mask of ``env_steps`` steps, ``next_obs``, no truncations).

Accounting that survives SIGKILL: before each fragment is handed to the stream, the host
writes a line to its ledger (``<acct_dir>/host-<i>.log``, opened O_APPEND, one ``write`` per
record, no user-space buffer: what was written is in the kernel's page cache when the
process dies). Records: ``S i`` a fragment of sim i is being sent; ``X i`` it was not (the
stream raised first); ``R i`` the aggregator refused an earlier one; ``L i n`` n in flight
were lost when the stream broke (the aggregator restarted). The harness sums the ledgers
against the aggregators' counters (``swarm.account``). A restarted host appends to the same
ledger.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from pathlib import Path
from typing import Any

import numpy as np

from rlmesh.roles.runner_policy import VersionedPolicies
from rlmesh.runtime import Actor, ActorUnavailable, RemoteError
from rlmesh.runtime.protocol import Protocol

POLICY = "default_policy"
FRAGMENT_T = 32  # time steps of a fragment (B = 1): its env_steps
POLL_S = 0.2  # a sim told ``pushed: False`` asks for newer weights this often
IDLE_BOUNDARY_S = 1.0  # a sim that streams nothing reaches a "fragment boundary" this often

_hosts: dict[str, "SwarmHost"] = {}  # this process's host, by actor name (sims find it here)


def make_fragment(nbytes: int, version: int = 0) -> dict[str, Any]:
    """A fragment of about ``nbytes`` bytes of arrays that the real aggregator accepts: the
    obs column carries the size ([T, 1, D] float32), the rest is what a batch needs."""
    if nbytes < 4 * FRAGMENT_T:
        raise ValueError(f"fragment size {nbytes} B is below the smallest ({4 * FRAGMENT_T} B)")
    t, dim = FRAGMENT_T, max(1, nbytes // (4 * FRAGMENT_T) - 1)
    return {"obs": np.zeros((t, 1, dim), np.float32), "actions": np.zeros((t, 1), np.int64),
            "rewards": np.zeros((t, 1), np.float32), "mask": np.ones((t, 1), bool),
            "terminateds": np.zeros((t, 1), bool), "truncateds": np.zeros((t, 1), bool),
            "next_obs": np.zeros((1, dim), np.float32),
            "trunc_index": np.zeros((0, 2), np.int64), "trunc_obs": np.zeros((0, dim), np.float32),
            "env_steps": t, "policy_version": version}


def fragment_bytes(fragment: dict[str, Any]) -> int:
    """The bytes of a fragment's arrays (what the wire carries, less a few hundred of header)."""
    return sum(v.nbytes for v in fragment.values() if isinstance(v, np.ndarray))


class DroppedWeights:
    """A sim's policy: it loads nothing (the weights were dropped as they arrived)."""

    def set_weights(self, weights: Any) -> None:
        pass


class SimRunner(VersionedPolicies, Actor):
    """What the control plane sees of one env runner: a name, a socket, and the real
    runner's weights logic (``VersionedPolicies``), with nothing to load."""

    protocol = Protocol(calls=("take_weights", "version_held", "weights_source_back"))

    def __init__(self, host: str, index: int, source: str = "param_server",
                 fallback: str = "param_server") -> None:
        self.host_name = host
        self.index = index
        self.policies = {POLICY: DroppedWeights()}
        self.versions = {POLICY: -1}
        self._ps_name, self._ps = source, None
        self._ps_fallback = fallback if fallback != source else None
        self._inbox: dict[str, Any] = {}
        self._stats = {"num_weight_pushes": 0, "num_weight_pulls": 0, "num_weight_updates": 0}
        self.noted = -1  # the newest version this sim was sent (pushed or asked for)
        self.subscriptions = 0

    def _keep(self, got: dict[str, list[Any]]) -> None:
        """As a runner keeps what it is sent, less the arrays; the version's arrival noted."""
        _hosts[self.host_name].note(self, got)
        super()._keep({pid: [version, {}] for pid, (version, _) in got.items()})

    def version_held(self) -> int:
        return max(self.noted, self.version)

    @property
    def on_fallback(self) -> bool:
        return self._ps is not None and self._ps_on != self._ps_name


class SwarmHost(Actor):
    """Serves ``sims`` (their global indices) as ``SimRunner`` actors of this process, each
    subscribed to ``source`` (``fallback`` when that cannot be reached) and streaming
    fragments of ``fragment_size`` bytes, ``fragment_rate`` a second each, to ``sink``."""

    protocol = Protocol(calls=("stats", "stop_streams", "pid", "ready", "addresses", "go"))
    spin_wait_us = 0  # many sims share this loop: never hold the core polling

    def __init__(self, index: int, sims: list[int], source: str = "param_server",
                 fallback: str = "param_server", sink: str = "", fragment_size: int = 4096,
                 fragment_rate: float = 0.0, window: int = 2, acct_dir: str = "",
                 hold: bool = False) -> None:
        if fragment_rate < 0 or window < 1:
            raise ValueError(f"fragment_rate must be >= 0 and window >= 1, got "
                             f"{fragment_rate} and {window}")
        self.index = index
        self.sim_ids = list(sims)
        self.source, self.fallback, self.sink = source, fallback, sink
        self.fragment = make_fragment(fragment_size)
        self.rate, self.window = fragment_rate, window
        self.sims: list[SimRunner] = []
        self.arrivals: dict[int, list[float]] = {}  # version -> time each sim first held it
        self.counts = {"sent": 0, "unsent": 0, "refused": 0, "lost": 0, "pushes": 0,
                       "polls": 0, "fallbacks": 0, "subscribed": 0, "resubscribed": 0,
                       "subscribe_failures": 0}
        self.failures: dict[str, int] = {}  # why subscribe calls failed, and how often
        self._stopping = False
        self._tasks: list[asyncio.Task[None]] = []
        self._senders: dict[int, Any] = {}
        # ``hold``: the sims start once the harness calls ``go`` (it first registers their
        # names where the param server looks them up: another node's run directory).
        self._go = asyncio.Event()
        if not hold:
            self._go.set()
        ledger = Path(acct_dir or ".") / f"host-{index}.log"
        self._ledger = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    async def on_start(self) -> None:
        _hosts[self.name] = self
        for i in self.sim_ids:
            await self.job.spawn(SimRunner, name=f"env_runner-{i}", in_process=True,
                                 host=self.name, index=i, source=self.source,
                                 fallback=self.fallback)
            self.sims.append(self.job.local_actor(f"env_runner-{i}"))
        for sim in self.sims:
            self._tasks.append(asyncio.ensure_future(self._run(sim)))

    async def on_stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        os.close(self._ledger)

    # --- weights ---

    def note(self, sim: SimRunner, got: dict[str, Any]) -> None:
        """``sim`` was sent ``got``: the first time it holds a version, noted."""
        entry = got.get(POLICY)
        if entry is None:
            return
        self.counts["pushes"] += 1
        version = int(entry[0])  # entry[1], the arrays, is dropped with ``got``
        if version > sim.noted:
            sim.noted = version
            self.arrivals.setdefault(version, []).append(time.time())

    async def _boundary(self, sim: SimRunner) -> None:
        """A fragment boundary, as a runner has one: take the pushed weights (subscribing
        first). A subscription that fails (the source answered with an error, or the param
        server did not answer in time) would crash a real runner, which its supervisor
        starts again and which subscribes again: here the sim tries again after a second."""
        while True:
            first = sim._ps is None
            try:
                await sim._refresh_weights()
            except (KeyError, ActorUnavailable, RemoteError) as exc:
                self.counts["subscribe_failures"] += 1
                why = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
                self.failures[why] = self.failures.get(why, 0) + 1
                sim._ps = None
                await asyncio.sleep(1.0)
                continue
            if first:
                sim.subscriptions += 1
                self.counts["subscribed" if sim.subscriptions == 1 else "resubscribed"] += 1
            return

    async def _run(self, sim: SimRunner) -> None:
        await self._go.wait()
        await self._boundary(sim)
        if self.rate > 0 and self.sink:
            await self._stream(sim)
            return
        while not self._stopping:  # no fragments: a boundary now and then all the same
            await asyncio.sleep(POLL_S if sim._asks else IDLE_BOUNDARY_S)
            await self._boundary(sim)

    # --- fragments ---

    def _record(self, kind: bytes, sim: int, n: int = 1) -> None:
        os.write(self._ledger, b"%s %d %d\n" % (kind, sim, n))

    async def _stream(self, sim: SimRunner) -> None:
        loop = asyncio.get_running_loop()
        period = 1.0 / self.rate
        await asyncio.sleep(random.random() * period)  # spread the sims' phases
        due = loop.time()
        while not self._stopping:
            sender = self._senders.get(sim.index)
            if sender is None:
                handle = await self.job.get_actor(self.sink, timeout=60)
                sender = self._senders[sim.index] = handle.stream("add_fragment", self.window)
            await self._boundary(sim)
            self._record(b"S", sim.index)
            self.counts["sent"] += 1
            try:
                await sender.send({**self.fragment, "policy_version": sim.version})
            except ActorUnavailable:  # the aggregator restarted: what was in flight is lost
                self._record(b"X", sim.index)
                self._record(b"L", sim.index, sender.in_flight)
                self.counts["unsent"] += 1
                self.counts["lost"] += sender.in_flight
                sender.close()
                del self._senders[sim.index]
            except RemoteError:  # an earlier fragment was refused; this one was not sent
                self._record(b"X", sim.index)
                self._record(b"R", sim.index)
                self.counts["unsent"] += 1
                self.counts["refused"] += 1
            due += period
            await asyncio.sleep(max(0.0, due - loop.time()))

    async def stop_streams(self, timeout: float = 30.0) -> dict[str, Any]:
        """Stop sending, wait until every fragment sent was handled, and return ``stats()``."""
        self._stopping = True
        await asyncio.wait(self._tasks, timeout=timeout)
        for sender in list(self._senders.values()):
            try:
                await asyncio.wait_for(sender.flush(), timeout)
            except (ActorUnavailable, RemoteError, asyncio.TimeoutError):
                pass
        return self.stats()

    # --- the harness's view ---

    def stats(self, since: int = 0) -> dict[str, Any]:
        """Counters, and for each version from ``since`` the times the sims first held it."""
        counts = {**self.counts, "fallbacks": sum(s._stats.get("num_weight_fallbacks", 0)
                                                   for s in self.sims),
                  "polls": sum(s._stats["num_weight_pulls"] for s in self.sims)}
        return {"index": self.index, "sims": len(self.sims), "counts": counts,
                "held": [s.version_held() for s in self.sims], "failures": dict(self.failures),
                "on_fallback": sum(s.on_fallback for s in self.sims),
                "arrivals": {str(v): t for v, t in self.arrivals.items() if v >= since}}

    def ready(self) -> int:
        """How many sims have subscribed (the harness waits for all)."""
        return self.counts["subscribed"]

    def addresses(self) -> dict[str, str]:
        """Each sim's name and address (the harness registers them on the head)."""
        return {s.name: self.job.handles[s.name].address for s in self.sims}

    def go(self) -> None:
        self._go.set()

    def pid(self) -> int:
        return os.getpid()
