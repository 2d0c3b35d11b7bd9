"""Agents that join the head, for providers that start the agents themselves: one ``srun``
step over a Slurm allocation, or each pod of a Kubernetes Job (``rlmesh node --from-env``).

Over SSH the head starts each agent and reads its ``RLMESH_READY`` line from the ssh client.
Where the cluster's own engine starts them, the head cannot: it opens a *join desk* (an actor
on the head's cluster address; CURVE like every cluster socket) and waits for each node's
agent to call ``join(node, record, info)`` once it serves. From then on a joined agent is
supervised as an SSH-started one is (``JoinedAgent`` has ``ChildProcess``'s methods): the
head's heartbeats reach it at the control address it gave, and a node whose agent dies or
goes silent is a lost node. Its stop is the control socket's STOP; what else ends it is the
provider's lifeline (the srun step's stdin and the step itself; for a pod, the head's
heartbeats stopping).

The agent's side (``join_head``) retries until the head answers, since pods start in any
order, and gives up after ``RLMESH_JOIN_TIMEOUT_S``. A node the head does not expect, or one
that joined already, is refused with a line naming it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from typing import Any, Callable, Collection

from rlmesh.runtime import Actor, ActorUnavailable, RemoteError
from rlmesh.runtime.process import ActorStartError, ChildSpec, describe_exit
from rlmesh.runtime.protocol import Protocol
from rlmesh.runtime.run_dir import ProcessRecord, RunDir

log = logging.getLogger(__name__)

JOIN_TIMEOUT_S = float(os.environ.get("RLMESH_JOIN_TIMEOUT_S", "300"))
RETRY_S = 1.0  # between an agent's tries to reach a head that is not up yet


class JoinRefused(RuntimeError):
    """The head answered and refused this agent (a node it does not expect, or a second
    agent for one node)."""


class JoinDesk(Actor):
    """The head's door for agents that start themselves: each ``join`` is one node's agent,
    serving at the record's addresses. ``expected`` (node names) refuses strangers; None
    takes any node."""

    protocol = Protocol(calls=("join",))
    spin_wait_us = 0  # in the head's own process, beside the driver

    def __init__(self, expected: Collection[str] | None = None) -> None:
        self.expected = None if expected is None else set(expected)
        self.joined: dict[str, dict[str, Any]] = {}
        self._changed = asyncio.Event()

    def join(self, node: str, record: dict[str, Any], info: dict[str, Any] | None = None) -> dict[str, Any]:
        if self.expected is not None and node not in self.expected:
            raise JoinRefused(f"node {node!r} is not one of this job's nodes "
                              f"({', '.join(sorted(self.expected)) or 'none'})")
        if node in self.joined:
            raise JoinRefused(f"node {node!r} has an agent already (pid "
                              f"{self.joined[node]['record'].get('pid')})")
        ProcessRecord(**record)  # every field a record has, or TypeError back to the agent
        self.joined[node] = {"record": dict(record), "info": dict(info or {}),
                             "at": time.monotonic()}
        log.info("node %s joined (pid %s, %s)", node, record.get("pid"), record.get("control"))
        self._changed.set()
        return {"ok": True}

    async def wait_for(self, node: str, timeout: float,
                       gone: Callable[[], str | None] = lambda: None) -> dict[str, Any]:
        """The join of ``node``, waited for up to ``timeout`` s; ActorStartError if ``gone``
        says why it never will (its step ended) or the time runs out."""
        deadline = time.monotonic() + timeout
        while node not in self.joined:
            why = gone()
            if why:
                raise ActorStartError(f"the agent of node {node} ended before it joined: {why}")
            left = deadline - time.monotonic()
            if left <= 0:
                raise ActorStartError(f"the agent of node {node} did not join the head within "
                                      f"{timeout:.0f} s")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), min(left, 0.5))
            except asyncio.TimeoutError:
                pass
        return self.joined[node]


class JoinedAgent:
    """A joined node agent, as the head's supervisor sees it (``ChildProcess``'s methods).
    ``exit_code`` is the provider's word on the agent's process (its srun task's exit, or
    None while it runs or where nothing can tell); ``why_gone`` says why it will never join."""

    def __init__(self, spec: ChildSpec, run_dir: RunDir, node: str, desk: JoinDesk,
                 exit_code: Callable[[], int | None] = lambda: None,
                 why_gone: Callable[[], str | None] = lambda: None) -> None:
        self.spec = spec
        self.run_dir = run_dir
        self.node = node
        self.desk = desk
        self.log_path = run_dir.log_path(spec.name)
        self.record: ProcessRecord | None = None
        self._exit_code = exit_code
        self._why_gone = why_gone
        self._stopped: int | None = None  # set once it no longer answers (wait_exit)

    @property
    def pid(self) -> int:
        return self.record.pid if self.record is not None else -1

    def start(self) -> None:
        """Nothing here: the provider started it (the srun step, the pod)."""

    async def wait_ready(self, timeout: float) -> ProcessRecord:
        joined = await self.desk.wait_for(self.node, timeout, self._why_gone)
        self.record = ProcessRecord(**joined["record"])
        return self.record

    def poll(self) -> int | None:
        code = self._exit_code()
        return code if code is not None else self._stopped

    def describe_exit(self, what: str) -> str:
        return describe_exit(self.spec, self.poll(), self.log_path, what, f" on node {self.node}")

    def signal(self, sig: int) -> None:
        self.signal_group(sig)

    def signal_group(self, sig: int) -> None:
        """Any signal the head sends an agent is a stop: it has no process here to signal."""
        if self.record is not None and self.poll() is None:
            asyncio.ensure_future(self._stop(5.0))

    def kill(self) -> None:
        self.signal_group(9)

    async def wait_exit(self, timeout: float) -> bool:
        """Its end, as the provider sees it, or else as its control socket does: once it no
        longer answers a PING (a stopped agent closes it last), it has exited."""
        from rlmesh.runtime.control import ping_control

        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if self.record is not None:
                rtt, _ = await loop.run_in_executor(None, ping_control, self.record.control,
                                                    min(1.0, max(left, 0.1)))
                if rtt is None:
                    self._stopped = 0
                    break
            await asyncio.sleep(min(0.1, max(left, 0)))
        return True

    async def terminate(self, grace: float = 3.0) -> None:
        if self.record is not None and self.poll() is None:
            await self._stop(grace)
            # Where the provider sees the process (an srun task), wait for its end too.
            await self.wait_exit(grace)

    async def _stop(self, timeout: float) -> None:
        assert self.record is not None
        from rlmesh.runtime.job import send_stop

        await send_stop(self.record.control, timeout)  # its end: wait_exit sees it

    def cleanup(self) -> None:
        pass


# --- the agent's side ------------------------------------------------------------------------

def outward_address(head: str) -> str:
    """This machine's address on the route to ``head`` (an address or a DNS name): the one
    the head and the other nodes reach it on. No packet is sent (a UDP socket's connect only
    picks the route)."""
    target = socket.getaddrinfo(head, 9, type=socket.SOCK_DGRAM)[0]
    with socket.socket(target[0], socket.SOCK_DGRAM) as probe:
        probe.connect(target[4])
        return str(probe.getsockname()[0])


async def join_head(address: str, node: str, record: ProcessRecord, info: dict[str, Any],
                    timeout: float = JOIN_TIMEOUT_S) -> None:
    """Tell the head at ``address`` (its join desk) that ``node``'s agent serves at
    ``record``'s addresses, trying until it answers or ``timeout`` s pass. JoinRefused if it
    refuses; TimeoutError if it never answers."""
    import dataclasses

    from rlmesh.runtime import ActorHandle

    deadline = time.monotonic() + timeout
    last = "no answer"
    while True:
        handle = ActorHandle(address, timeout=10.0)
        try:
            await handle.call("join", node, dataclasses.asdict(record), info, timeout=10.0)
            return
        except RemoteError as exc:
            raise JoinRefused(f"the head at {address} refused node {node}: {exc.remote_msg}") from None
        except (ActorUnavailable, asyncio.TimeoutError, TimeoutError, OSError) as exc:
            last = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        finally:
            handle.close()
        if time.monotonic() + RETRY_S > deadline:
            raise TimeoutError(f"no head answered at {address} within {timeout:.0f} s "
                               f"(last: {last})")
        await asyncio.sleep(RETRY_S)
