"""The node agent: one per node, started by the head over SSH without a terminal.

It reports the node's resources, starts the job's actor processes on its node (each in its
own session, tied to the agent by a lifeline), reports their exits and output, and takes
everything down when the head goes: its stdin (the SSH session) closing, or the head's
heartbeats stopping. It also keeps its actors' heartbeats (runtime/node_watch.py): it pings
them on this machine and reports, in the poll the head makes of it, which are hung and what
their status says, so that the head pings one process per node, not one per actor.
``python -m rlmesh.launcher.agent NODE HOST RUNS_ROOT JOB_ID CURVE_DIR``
prints one ``RLMESH_READY {record}`` line once it serves.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import zmq

from rlmesh.runtime import Actor
from rlmesh.runtime.child_limits import MemoryGauge
from rlmesh.runtime.control import ping_control
from rlmesh.runtime.diagnostics import stopped_state
from rlmesh.runtime.node_watch import ChildWatch
from rlmesh.runtime.protocol import Protocol
from rlmesh.runtime.process import ChildProcess, ChildSpec, tail
from rlmesh.runtime.run_dir import RunDir
from rlmesh.runtime.work_counter import counter_path, take_count
from rlmesh.wire import codec, messages as M
from rlmesh.wire.sockets import AsyncSocket, configure, connect

log = logging.getLogger(__name__)

READY = "RLMESH_READY "
MAX_OUTPUT_BYTES = 64 * 1024  # of one child's new output per poll: the rest comes next time
# No heartbeat from the head for this long: the head (or the network to it) is gone.
HEAD_SILENCE_S = float(os.environ.get("RLMESH_HEAD_SILENCE_S", "15"))
WATCH_TICK_S = 0.1  # how often the agent looks at its actors' heartbeats (the head's poll_s)


class NodeAgent(Actor):
    """Starts and watches the actor processes of one node for the head."""

    protocol = Protocol(calls=("resources", "start_child", "poll", "signal", "stop_child",
                               "register_name", "processes", "stacks", "watch_child"),
                        test_hooks=("pid",))

    def __init__(self, node: str, host: str) -> None:
        self.node = node
        self.host = host
        self.children: dict[str, ChildProcess] = {}
        self._offsets: dict[str, int] = {}  # bytes of each child's log already sent home
        self._counts: dict[int, tuple[float, int]] = {}  # pid -> (when, messages handled)
        self.watches: dict[str, ChildWatch] = {}  # each child's heartbeat, kept here
        self._pingers: dict[str, AsyncSocket] = {}
        self._gauges: dict[str, MemoryGauge] = {}
        self._watcher: asyncio.Task[None] | None = None

    def resources(self) -> dict[str, float]:
        from rlmesh.launcher.cluster_config import detect_resources

        return detect_resources()

    async def start_child(self, spec: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
        """Start an actor process from its spec (ChildSpec's fields); its process record."""
        child_spec = ChildSpec(**spec)
        child_spec.node = ""
        child_spec.address = child_spec.address or f"tcp://{self.host}:0"
        old = self.children.pop(child_spec.name, None)
        if old is not None:
            old.kill()
            old.cleanup()
        self._unwatch(child_spec.name)
        child = ChildProcess(child_spec, self.job.run_dir)
        child.start()
        record = await child.wait_ready(timeout)
        self.children[child_spec.name] = child
        self._offsets[child_spec.name] = 0
        self._watch(child_spec.name, record.pid, record.control)
        return dataclasses.asdict(record)

    def watch_child(self, name: str, pid: int, interval: float, timeout: float,
                    work_key: str = "", max_memory_mb: float = 0.0) -> bool:
        """The head's heartbeat numbers for child ``name`` (process ``pid``): its Job's
        interval and timeout, its restart policy's work key and memory limit (0: none).
        False when that process is no longer watched here (it ended, or was replaced)."""
        watch = self.watches.get(name)
        if watch is None or watch.pid != pid:
            return False
        watch.configure(interval, timeout, work_key, max_memory_mb)
        if max_memory_mb > 0 and name not in self._gauges:
            try:
                self._gauges[name] = MemoryGauge(pid)
            except psutil.Error:  # dead already: the next poll reports its exit
                pass
        return True

    def poll(self) -> dict[str, Any]:
        """Children that exited since the last poll (exit code, last lines, their work
        counter where the head asked for one), every child's new output, and the heartbeat
        of each one still running (``ChildWatch.entry``: its age, hung or not, what changed
        of its status and memory)."""
        exits, output, watch = [], {}, {}
        now = time.monotonic()
        for name, child in list(self.children.items()):
            text = self._new_output(name, child)
            if text:
                output[name] = text
            code = child.poll()
            if code is not None:
                ended = {"name": name, "pid": child.pid, "code": code,
                         "lines": tail(child.log_path)}
                key = self.watches[name].work_key if name in self.watches else ""
                work = take_count(counter_path(self.job.run_dir.path, name, key)) if key else None
                if work is not None:  # what it counted up to its end, for the crash window
                    ended["work"] = work
                exits.append(ended)
                child.cleanup()
                del self.children[name]
                self._unwatch(name)
            elif name in self.watches:
                watch[name] = self.watches[name].entry(now)
        return {"exits": exits, "output": output, "watch": watch}

    # --- heartbeats of the node's children ---

    def _watch(self, name: str, pid: int, control: str) -> None:
        """Ping child ``name`` from here from now on, with this agent's own heartbeat
        numbers until the head sends its own (``watch_child``)."""
        watch = ChildWatch(pid, self.job.heartbeat_interval, self.job.heartbeat_timeout,
                           now=time.monotonic())
        sock = configure(zmq.Context.instance().socket(zmq.DEALER), 1 << 20, hwm=10)
        connect(sock, control)
        self.watches[name] = watch
        self._pingers[name] = AsyncSocket(sock, lambda frames: self._on_pong(watch, frames))
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.get_running_loop().create_task(
                self._watch_loop(), name="rlmesh.agent-watch")

    def _unwatch(self, name: str) -> None:
        self.watches.pop(name, None)
        self._gauges.pop(name, None)
        sock = self._pingers.pop(name, None)
        if sock is not None:
            sock.close()

    def _on_pong(self, watch: ChildWatch, frames: list[Any]) -> None:
        try:
            msg = M.validate(codec.decode(frames, codec.Limits.with_max(1 << 20)))
        except (codec.DecodeError, M.ProtocolError):
            return
        if msg["t"] == M.PONG:
            if watch.confirm_from is not None:
                log.warning("process %d answered a heartbeat %.1f s late", watch.pid,
                            time.monotonic() - watch.watch.last_pong)
            watch.pong(time.monotonic(), msg["status"])

    async def _watch_loop(self) -> None:
        """Every WATCH_TICK_S: ping the children due, mark the hung ones (with their stopped
        state, read here on their machine), read the memory of those with a limit."""
        while True:
            now = time.monotonic()
            for name, watch in list(self.watches.items()):
                was_hung = watch.hung
                if watch.step(now):
                    sock = self._pingers.get(name)
                    if sock is not None:
                        sock.send_nowait(codec.encode(M.make(M.PING, id=1)))
                if watch.hung and not was_hung:
                    watch.stopped = stopped_state(watch.pid)
                    log.warning("%s (pid %d) sent no heartbeat for %.1f s: reported hung",
                                name, watch.pid, now - watch.watch.last_pong)
                gauge = self._gauges.get(name)
                if gauge is not None and now >= gauge.next_at:
                    mb = gauge.rss_mb(now)
                    if mb is not None:
                        watch.mb = mb
                        gauge.schedule(now, watch.max_memory_mb, WATCH_TICK_S)
            await asyncio.sleep(WATCH_TICK_S)

    def _new_output(self, name: str, child: ChildProcess) -> str:
        try:
            with open(child.log_path, "rb") as fh:
                fh.seek(self._offsets.get(name, 0))
                data = fh.read(MAX_OUTPUT_BYTES)
        except FileNotFoundError:
            return ""
        self._offsets[name] = self._offsets.get(name, 0) + len(data)
        return data.decode("utf-8", "replace")

    def signal(self, name: str, signum: int) -> None:
        child = self.children.get(name)
        if child is not None:
            child.signal_group(signum)

    async def stop_child(self, name: str, grace: float = 3.0) -> None:
        child = self.children.get(name)
        if child is not None:
            await child.terminate(grace)

    def register_name(self, name: str, address: str) -> None:
        """Record a named actor of the job, so processes on this node find it."""
        self.job.run_dir.register_name(name, address, os.getpid(), replace=True)

    async def processes(self, timeout: float = 1.0) -> list[dict[str, Any]]:
        """This node's processes of the job (the agent's own included): each record, with
        its heartbeat (a PING answered now: round trip, loop lag, blocked) and the messages
        it handles per second since the last call."""
        records = [dataclasses.asdict(r) for r in self.job.run_dir.processes()]
        loop = asyncio.get_running_loop()
        pongs = await asyncio.gather(*(loop.run_in_executor(None, ping_control, r["control"], timeout)
                                       for r in records))
        now = time.monotonic()
        for record, (rtt, status) in zip(records, pongs):
            record["heartbeat_ms"] = None if rtt is None else round(rtt * 1000, 2)
            record["state"] = ("unresponsive" if status is None else
                               "blocked" if status["loop"]["blocked"] else "running")
            if status is None:
                continue
            record["loop_lag_ms"] = round(status["loop"]["lag_mean_s"] * 1000, 2)
            count = sum(p.get("stats", {}).get("messages", 0)
                        for p in status["probes"].values() if isinstance(p, dict))
            before = self._counts.get(record["pid"])
            self._counts[record["pid"]] = (now, count)
            if before is not None and now > before[0]:
                record["messages_per_s"] = round((count - before[1]) / (now - before[0]), 1)
        return records

    async def stacks(self, timeout: float = 3.0) -> list[dict[str, Any]]:
        """``rlmesh stack``'s entries for this node's processes of the job (the agent's
        own included), each marked with the node."""
        from rlmesh.cli.stack import Target, collect, read_records

        run_dir = self.job.run_dir
        targets = [Target(r, run_dir) for r in read_records(run_dir) if r.is_alive()]
        entries = await asyncio.get_running_loop().run_in_executor(None, collect, targets, timeout)
        for entry in entries:
            entry["node"] = self.node
        return entries

    def pid(self) -> int:
        return os.getpid()

    async def on_stop(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
        for name in list(self.watches):
            self._unwatch(name)
        await asyncio.gather(*(c.terminate(2.0) for c in self.children.values()),
                             return_exceptions=True)
        self.children.clear()


async def serve(node: str, host: str, runs_root: str, job_id: str, join: str = "",
                lifeline_fd: int | None = 0) -> None:
    from rlmesh.runtime.actor import ActorServer
    from rlmesh.runtime.job import Job

    run_dir = RunDir.create(job_id, Path(runs_root))
    name = f"agent-{node}"
    # stdin is the SSH session (or the srun step's, forwarded): its end (the head's client
    # gone) is the lifeline's. A pod has none: the head's heartbeats are its lifeline.
    # A joining agent may wait minutes for its head (pods start in any order): the head's
    # silence counts from its join.
    job = Job("tcp", name=name, role="NodeAgent", run_dir=run_dir, lifeline_fd=lifeline_fd,
              host=host, ping_timeout=None if join else HEAD_SILENCE_S)
    await job.start()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, job.request_stop)
    agent = NodeAgent(node, host)
    agent.job, agent.name = job, name
    server = ActorServer(agent, name, limits=job.limits)
    address = await server.start(f"tcp://{host}:0")
    job.diagnostics.add_probe("server", server.probe)
    job.register_self(address=address, cls="rlmesh.launcher.agent:NodeAgent")
    record = run_dir.read_process(name)
    print(READY + json.dumps(dataclasses.asdict(record)), flush=True)
    try:
        if join:
            from rlmesh.launcher.join import JoinRefused, join_head

            try:
                await join_head(join, node, record, {"host": host, **_step_info()})
            except (JoinRefused, TimeoutError) as exc:
                print(f"rlmesh agent: error: {exc}", file=sys.stderr, flush=True)
                raise SystemExit(1) from None
            job.watch_parent(HEAD_SILENCE_S)
        await job.wait_stopped()
    finally:
        await agent.on_stop()
        server.close()
        await job.shutdown()


def _step_info() -> dict[str, Any]:
    """What the head may want to know of where this agent runs (its srun task, its pod)."""
    names = ("SLURM_PROCID", "SLURM_NODEID", "SLURM_STEP_ID", "JOB_COMPLETION_INDEX")
    return {n.lower(): os.environ[n] for n in names if n in os.environ}


def node_name(given: str) -> str:
    """The agent's node name: ``given``, or ("-") Slurm's name for this node, else the
    host name."""
    if given != "-":
        return given
    import socket

    return os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def keys_from_env(runs_root: str, job_id: str) -> str:
    """The cluster's CURVE keys given in the environment (``RLMESH_CLUSTER_KEY`` and
    ``RLMESH_CLUSTER_KEY_SECRET``: the files' texts, as a Slurm step passes them to every
    node without a shared file system) written to a folder only this user reads; its path.
    The variables leave the environment: the actors find the folder instead."""
    from rlmesh.wire.security import PUBLIC, SECRET

    folder = Path(runs_root).expanduser() / ".keys" / job_id
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(folder, 0o700)
    for name, var in ((PUBLIC, "RLMESH_CLUSTER_KEY"), (SECRET, "RLMESH_CLUSTER_KEY_SECRET")):
        text = os.environ.pop(var, None)
        if not text:
            raise SystemExit(f"rlmesh agent: error: curve keys from the environment asked for, "
                             f"but {var} is not set")
        path = folder / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
    return str(folder)


def main(argv: list[str] | None = None) -> None:
    """``NODE HOST RUNS_ROOT JOB_ID CURVE_DIR`` as the SSH provider starts it; with
    ``--join ADDRESS`` the agent joins the head there instead of being read by it (NODE "-":
    Slurm's name for this node or the host name; HOST "auto": the address on the route to the
    head; CURVE_DIR "env": the keys in the environment), ``--no-stdin`` for a pod."""
    import argparse

    from rlmesh.runtime.job import ENV_BIND_HOST
    from rlmesh.wire.security import ENV_CURVE_DIR

    p = argparse.ArgumentParser(prog="python -m rlmesh.launcher.agent")
    p.add_argument("node")
    p.add_argument("host")
    p.add_argument("runs_root")
    p.add_argument("job_id")
    p.add_argument("curve_dir")
    p.add_argument("--join", default="", metavar="ADDRESS",
                   help="the head's join desk (tcp://HOST:PORT): tell it this agent serves")
    p.add_argument("--no-stdin", action="store_true",
                   help="stdin is no lifeline (a pod's): the head's heartbeats are")
    args = p.parse_args(argv if argv is not None else sys.argv[1:])
    node = node_name(args.node)
    host = args.host
    if host == "auto":
        if not args.join:
            raise SystemExit("rlmesh agent: error: HOST 'auto' needs --join (the head's address)")
        from rlmesh.launcher.join import outward_address

        host = outward_address(args.join.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]"))
    job_id = args.job_id if not args.join else f"{args.job_id}-{node}"
    runs_root = os.path.expanduser(args.runs_root)
    curve_dir = args.curve_dir
    if curve_dir == "env":
        curve_dir = keys_from_env(runs_root, job_id)
    os.environ[ENV_BIND_HOST] = host  # the children bind their sockets there too
    if curve_dir != "-":
        os.environ[ENV_CURVE_DIR] = os.path.expanduser(curve_dir)
    os.environ["RLMESH_RUNS_ROOT"] = runs_root
    logging.basicConfig(level=os.environ.get("RLMESH_LOG_LEVEL", "INFO"),
                        format=f"%(asctime)s %(levelname)s [agent-{node}] %(name)s: %(message)s")
    import uvloop

    uvloop.run(serve(node, host, runs_root, job_id, args.join,
                     None if args.no_stdin else 0))


if __name__ == "__main__":
    main()
