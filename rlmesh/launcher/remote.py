"""The head's view of processes on other nodes, shaped like ``ChildProcess`` so the head's
Job supervises them as it does local ones: the node agent itself (``AgentProcess``: a local
ssh client whose remote command is the agent) and the actors it starts (``RemoteChild``).
``NodeLink`` is one node: its agent's handle, its children, their exits and output, and
their heartbeats, which the agent keeps on its node and reports in each poll
(runtime/node_watch.py): the head's supervisor pings the agent, not the actors behind it,
and reads each ``RemoteChild``'s latest report instead (``take_report``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import subprocess
import threading
import time
from typing import Any, Callable

from rlmesh.runtime import ActorUnavailable, RemoteError
from rlmesh.runtime.process import ActorStartError, ChildSpec, describe_exit, wait_for_exit
from rlmesh.runtime.run_dir import ProcessRecord, RunDir
from rlmesh.wire import codec

log = logging.getLogger(__name__)

READY = "RLMESH_READY "
POLL_S = 0.3  # how often the head asks each agent for exits and output


class AgentProcess:
    """A node agent, as the head's supervisor sees it: the ssh client running it. Its stdin
    stays open as the agent's lifeline; its output goes to the head's log of the agent."""

    def __init__(self, spec: ChildSpec, run_dir: RunDir, start: Callable[[], subprocess.Popen[bytes]],
                 node: str) -> None:
        self.spec = spec
        self.run_dir = run_dir
        self.node = node
        self.log_path = run_dir.log_path(spec.name)
        self._start = start
        self.popen: subprocess.Popen[bytes] | None = None
        self.record: ProcessRecord | None = None

    @property
    def pid(self) -> int:
        return self.record.pid if self.record is not None else -1

    def start(self) -> None:
        self.popen = self._start()
        threading.Thread(target=self._read_output, name=f"rlmesh.{self.spec.name}-output",
                         daemon=True).start()

    def _read_output(self) -> None:
        assert self.popen is not None and self.popen.stdout is not None
        with open(self.log_path, "ab") as log_file:
            for raw in self.popen.stdout:
                line = raw.decode("utf-8", "replace")
                if line.startswith(READY) and self.record is None:
                    self.record = ProcessRecord(**json.loads(line[len(READY):]))
                    continue
                log_file.write(raw)
                log_file.flush()

    async def wait_ready(self, timeout: float) -> ProcessRecord:
        deadline = time.monotonic() + timeout
        while self.record is None:
            if self.poll() is not None:
                raise ActorStartError(self.describe_exit("exited during start-up"))
            if time.monotonic() > deadline:
                self.kill()
                raise ActorStartError(self.describe_exit(f"not ready after {timeout} s; killed"))
            await asyncio.sleep(0.05)
        return self.record

    def poll(self) -> int | None:
        return None if self.popen is None else self.popen.poll()

    def describe_exit(self, what: str) -> str:
        return describe_exit(self.spec, self.poll(), self.log_path, what, f" on node {self.node}")

    def signal(self, sig: int) -> None:
        self.signal_group(sig)

    def signal_group(self, sig: int) -> None:
        # The local ssh client: its end closes the agent's stdin, and the agent takes its
        # children down with it.
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(sig)

    def kill(self) -> None:
        self.signal_group(signal.SIGKILL)

    async def wait_exit(self, timeout: float) -> bool:
        return await wait_for_exit(self.poll, timeout, 0.05)

    async def terminate(self, grace: float = 3.0) -> None:
        if self.popen is not None and self.popen.stdin is not None:
            self.popen.stdin.close()  # EOF on the agent's lifeline
        if not await self.wait_exit(grace):
            self.kill()
            await self.wait_exit(5.0)

    def cleanup(self) -> None:
        if self.popen is not None and self.popen.stdin is not None and not self.popen.stdin.closed:
            self.popen.stdin.close()


class RemoteChild:
    """An actor process an agent started on its node; exits, output and heartbeats come
    from the link's polling of the agent."""

    # The supervisor does not ping it: its agent does, and its reports come through here.
    watched_on_node = True

    def __init__(self, spec: ChildSpec, run_dir: RunDir, link: "NodeLink") -> None:
        self.spec = spec
        self.run_dir = run_dir
        self.link = link
        self.log_path = run_dir.log_path(spec.name)
        self.record: ProcessRecord | None = None
        self.code: int | None = None
        self.final_work: int | None = None  # its work counter at its end, read on its node
        self._report: dict[str, Any] = {}  # its agent's reports merged, with "at" (received)
        self._fresh = False  # a report came since take_report

    def watch_on_node(self, interval: float, timeout: float, work_key: str,
                      max_memory_mb: float) -> None:
        """Tell its agent the head's heartbeat numbers for it (node_watch.ChildWatch)."""
        if self.record is not None and self.code is None and self.link.alive:
            self.link.later(self.link.agent.call(
                "watch_child", self.spec.name, self.record.pid, float(interval),
                float(timeout), work_key, float(max_memory_mb), timeout=10))

    def watched(self, at: float, entry: dict[str, Any]) -> None:
        """Its agent's report (ChildWatch.entry), received at ``at`` (monotonic, here): what
        it leaves out (an unchanged status, memory) stays as last reported."""
        self._report.update(entry, at=at)
        if "hung" not in entry:
            self._report.pop("hung", None)
            self._report.pop("stopped", None)
        self._fresh = True

    def take_report(self) -> dict[str, Any] | None:
        """The latest report merged with the earlier ones, once per report received; None
        when none came since the last call."""
        if not self._fresh:
            return None
        self._fresh = False
        return self._report

    @property
    def pid(self) -> int:
        return self.record.pid if self.record is not None else -1

    def start(self) -> None:
        """Nothing here: the agent starts the process in ``wait_ready``."""

    async def wait_ready(self, timeout: float) -> ProcessRecord:
        fields = {k: v for k, v in self.spec.__dict__.items()}
        try:
            got = await self.link.agent.call("start_child", fields, timeout, timeout=timeout + 10)
        except (RemoteError, ActorUnavailable) as exc:
            self.code = -1
            raise ActorStartError(f"actor {self.spec.name!r} could not start on node "
                                  f"{self.link.node}: {exc}") from None
        self.record = ProcessRecord(**got)
        self.link.children[self.spec.name] = self
        return self.record

    def exited(self, code: int, lines: list[str], work: int | None = None) -> None:
        self.code = code
        self.final_work = work
        if lines and not self.log_path.exists():
            self.log_path.write_text("\n".join(lines) + "\n")

    def poll(self) -> int | None:
        return self.code

    def describe_exit(self, what: str) -> str:
        return describe_exit(self.spec, self.code, self.log_path, what, f" on node {self.link.node}")

    def signal(self, sig: int) -> None:
        self.signal_group(sig)

    def signal_group(self, sig: int) -> None:
        if self.code is None and self.link.alive:
            self.link.later(self.link.agent.call("signal", self.spec.name, int(sig), timeout=10))

    def kill(self) -> None:
        self.signal_group(signal.SIGKILL)

    async def wait_exit(self, timeout: float) -> bool:
        return await wait_for_exit(self.poll, timeout, 0.05)

    async def terminate(self, grace: float = 3.0) -> None:
        if self.code is None and self.link.alive:
            try:
                await self.link.agent.call("stop_child", self.spec.name, grace, timeout=grace + 10)
            except (RemoteError, ActorUnavailable) as exc:
                log.warning("stopping %s on %s: %s", self.spec.name, self.link.node, exc)
        self.cleanup()

    def cleanup(self) -> None:
        if self.link.children.get(self.spec.name) is self:
            del self.link.children[self.spec.name]


class NodeLink:
    """One node as the head's Job sees it: ``make_child`` starts actors there, names are
    registered there, and ``watch`` brings exits and output home."""

    def __init__(self, node: str, agent: Any, on_output: Callable[[str, str, str], None]) -> None:
        self.node = node
        self.agent = agent
        self.alive = True
        self.children: dict[str, RemoteChild] = {}
        self.on_output = on_output  # (node, actor name, text)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._watcher: asyncio.Task[None] | None = None
        # Supervision traffic of this link (Supervisor.traffic): polls sent, the bytes of
        # their replies, and the heartbeat entries of children they carried.
        self.polls = 0
        self.poll_bytes = 0
        self.entries = 0

    def make_child(self, spec: ChildSpec, run_dir: RunDir) -> RemoteChild:
        return RemoteChild(spec, run_dir, self)

    async def register_name(self, name: str, address: str) -> None:
        if self.alive:
            await self.agent.call("register_name", name, address, timeout=10)

    def later(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(lambda t: (self._tasks.discard(t), t.cancelled() or t.exception()))

    def start_watching(self) -> None:
        self._watcher = asyncio.ensure_future(self._watch())

    async def _watch(self) -> None:
        while self.alive:
            try:
                got = await self.agent.call("poll", timeout=10)
            except (ActorUnavailable, RemoteError):
                await asyncio.sleep(POLL_S)
                continue
            self.polls += 1
            self.poll_bytes += sum(len(f) for f in codec.encode(got))
            for name, text in got["output"].items():
                self.on_output(self.node, name, text)
            for ended in got["exits"]:
                child = self._child(ended["name"], ended["pid"])
                if child is not None:
                    child.exited(ended["code"], ended["lines"], ended.get("work"))
            now = time.monotonic()
            for name, entry in got.get("watch", {}).items():
                child = self._child(name, entry["pid"])
                if child is not None:  # not a report of the process it replaced
                    self.entries += 1
                    child.watched(now, entry)
            await asyncio.sleep(POLL_S)

    def _child(self, name: str, pid: int) -> RemoteChild | None:
        child = self.children.get(name)
        if child is not None and child.record is not None and child.record.pid == pid:
            return child
        return None

    def traffic(self) -> dict[str, int]:
        return {"polls": self.polls, "bytes": self.poll_bytes, "entries": self.entries}

    def lost(self, reason: str) -> None:
        """The node is gone: every child of it counts as killed."""
        self.alive = False
        for child in list(self.children.values()):
            if child.code is None:
                child.exited(-signal.SIGKILL, [f"node {self.node} lost: {reason}"])

    def close(self) -> None:
        self.alive = False
        for task in [self._watcher, *self._tasks]:
            if task is not None:
                task.cancel()
