"""A job: this process's place in a mesh of actors, and the API to spawn and find them.

``mode`` picks the transport: ``inproc`` runs every actor as tasks in this process,
``ipc`` (the default) starts local processes, ``tcp`` does the same over loopback TCP.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

import psutil
import zmq

from ..wire import codec, messages as M
from ..wire.sockets import AsyncSocket, configure, connect
from .actor import Actor, ActorServer
from .import_path import actor_path, instantiate
from .control import ControlThread
from .diagnostics import Diagnostics, install_fallback_dump, uninstall_fallback_dump
from .handle import ActorHandle, ActorUnavailable
from .process import ActorStartError, ChildProcess, ChildSpec
from .run_dir import ENV_RUN_DIR, ProcessRecord, RunDir, finish as finish_run_dir
from .supervisor import RestartPolicy, Supervised, Supervisor, Watch

log = logging.getLogger(__name__)

MODES = ("inproc", "ipc", "tcp")
ENV_BIND_HOST = "RLMESH_BIND_HOST"  # the address tcp sockets bind to (a node's cluster interface)
_current: "Job | None" = None
_job_factory: "Callable[[Any], Awaitable[Job]] | None" = None


def set_job_factory(factory: "Callable[[Any], Awaitable[Job]] | None") -> None:
    """Make ``make_job`` return the jobs ``factory`` makes (the cluster launcher's, whose
    actors land on the cluster's nodes); None restores the local default."""
    global _job_factory
    _job_factory = factory


def jobs_are_local() -> bool:
    """Whether ``make_job`` starts its actors on this machine (no factory set)."""
    return _job_factory is None


async def make_job(request: Any = None) -> "Job":
    """A started job for a run: local processes over ipc, unless a factory was set.
    ``request`` is what the run asks of the cluster (the factory places it)."""
    if _job_factory is not None:
        return await _job_factory(request)
    return await Job("ipc").start()


def current_job() -> "Job | None":
    """The Job of this process, if one is running."""
    return _current


class Job:
    """Spawns actors, finds them by name, supervises them, and answers the control plane."""

    def __init__(self, mode: str = "ipc", *, name: str = "driver", role: str = "driver",
                 run_dir: RunDir | Path | str | None = None, job_id: str | None = None,
                 heartbeat_interval: float = 1.0, heartbeat_timeout: float = 5.0,
                 max_message_bytes: int = codec.DEFAULT_MAX_MESSAGE_BYTES,
                 lifeline_fd: int | None = None, host: str | None = None,
                 ping_timeout: float | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.mode = mode
        # Environment variables of every actor process this job starts (RLMESH_LOG_LEVEL).
        self.child_env: dict[str, str] = {}
        self.name = name
        self.role = role
        if isinstance(run_dir, (str, Path)):
            run_dir = RunDir(Path(run_dir))
        self._owns_run_dir = run_dir is None  # made here: removed at shutdown (run_dir.finish)
        self.run_dir = run_dir or RunDir.create(job_id)
        self.heartbeat_interval = heartbeat_interval
        self.heartbeat_timeout = heartbeat_timeout
        self.limits = codec.Limits.with_max(max_message_bytes)
        self.diagnostics = Diagnostics(name, role)
        self.supervisor = Supervisor(self._restart)
        if role == "driver":  # slow work in this process too (an actor's: its parent says)
            self.supervisor.own_status = self.diagnostics.status
        self.handles: dict[str, ActorHandle] = {}
        self.host = host or os.environ.get(ENV_BIND_HOST, "127.0.0.1")
        # Other machines: node name -> a link that starts children there (make_child) and
        # learns names (register_name); placement: actor name -> node it goes to.
        self.nodes: dict[str, Any] = {}
        self.placement: dict[str, str] = {}
        self.replace_node: Callable[[str], str] | None = None  # actor name -> a live node
        self.on_shutdown: list[Callable[[], None]] = []  # called first thing in shutdown()
        self._lifeline_fd = lifeline_fd
        self._ping_timeout = ping_timeout
        self._factories: dict[str, Callable[[ChildSpec, RunDir], Any]] = {}
        self._inproc: dict[str, ActorServer] = {}
        self._counter = itertools.count()
        self._control: ControlThread | None = None
        self._dump_file: Any = None
        self._stopping = asyncio.Event()
        self.started = False

    @property
    def job_id(self) -> str:
        return self.run_dir.job_id

    # --- lifecycle ---

    async def start(self, current: bool = True) -> "Job":
        """Start the control plane and supervision; ``current=False`` keeps it out of
        ``current_job()`` (a driver's own actors, Ray's ``Counter.remote()``, are no run)."""
        global _current
        loop = asyncio.get_running_loop()
        self.diagnostics.monitor.start(loop)
        self.diagnostics.add_probe("handles", lambda: {
            n: {"pending_calls": len(h._pending), "streams": len(h._streams)}
            for n, h in list(self.handles.items())})
        self._dump_file = install_fallback_dump(self.run_dir.stack_dump_path(self.name, os.getpid()))
        self._control = ControlThread(self._control_address(self.name), self.diagnostics,
                                      lambda: loop.call_soon_threadsafe(self._stopping.set),
                                      self._lifeline_fd, self._ping_timeout)
        self._control.start()
        self.supervisor.start()
        if current:
            _current = self
        self.started = True
        if self.role == "driver":
            self.register_self()
        return self

    def watch_parent(self, silence_s: float) -> None:
        """From now on, no PING from the parent for ``silence_s`` ends this process (a node
        agent that joined its head: the head's heartbeats begin only once it has)."""
        assert self._control is not None
        self._control.last_ping = time.monotonic()
        self._control.ping_timeout = silence_s

    def register_self(self, address: str = "", cls: str = "") -> None:
        """Announce this process in the run directory (``rlmesh stack`` finds it there)."""
        assert self._control is not None
        self.run_dir.write_process(ProcessRecord(
            name=self.name, role=self.role, pid=os.getpid(),
            create_time=psutil.Process().create_time(), control=self._control.address,
            address=address, cls=cls, job=self.job_id))

    async def wait_stopped(self) -> None:
        """Until a STOP arrives on the control plane."""
        await self._stopping.wait()

    def request_stop(self) -> None:
        self._stopping.set()

    async def shutdown(self, grace: float = 3.0) -> None:
        """Stop every actor this job started (graceful, then SIGTERM, then SIGKILL)."""
        global _current
        for hook in self.on_shutdown:
            hook()
        self.supervisor.stop()
        children = list(self.supervisor.children.values())
        # Actors first, then what started them elsewhere (node agents), which the
        # actors' stopping still needs.
        hosts = [s for s in children if s.child.spec.name in self._factories]
        for batch in ([s for s in children if s not in hosts], hosts):
            await asyncio.gather(*(self._stop_child(s, grace) for s in batch),
                                 return_exceptions=True)
        self.supervisor.children.clear()
        for link in self.nodes.values():
            link.close()
        for server in self._inproc.values():
            await _call_hook(server.actor.on_stop)
            server.close()
        self._inproc.clear()
        for handle in self.handles.values():
            handle.close()
        self.diagnostics.monitor.stop()
        uninstall_fallback_dump(self._dump_file)
        if self._control is not None:
            self._control.close()
            self._control.join(2.0)
        self.run_dir.remove_process(self.name)
        if self._owns_run_dir:
            finish_run_dir(self.run_dir, (event.kind for event in self.supervisor.events))
        self.started = False
        if _current is self:
            _current = None

    async def __aenter__(self) -> "Job":
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.shutdown()

    # --- spawning ---

    async def spawn(self, cls: type[Actor] | str, /, *, name: str | None = None,
                    restart: RestartPolicy | None = None, role: str = "",
                    start_timeout: float = 60.0, address: str = "",
                    env: dict[str, str] | None = None, in_process: bool = False,
                    node: str | None = None, **kwargs: Any) -> ActorHandle:
        """Start an actor and return its handle once it answers.

        ``cls`` is an Actor subclass or its import path ``"pkg.mod:Class"``. Constructor
        arguments go by name (``kwargs``), are checked against the class's constructor where
        it is made (a wrong name is an error naming the ones it takes), and must be
        wire-encodable (plain data, arrays). With ``name``, any process
        of this job can find the actor with ``get_actor(name)``. ``env`` adds environment
        variables for the actor's process (numeric libraries get one thread each unless
        this or the driver's environment says otherwise). ``in_process`` serves the actor
        from this process's event loop (on the job's transport, so other processes reach it
        too), as RLlib's local env runner samples in the driver. ``node`` (default: the
        job's ``placement`` of the name) starts it on another machine of ``nodes``.
        """
        cls_path, main_path = actor_path(cls)
        actor_name = name or f"{cls_path.rpartition(':')[2]}-{next(self._counter)}"
        if actor_name in self.handles:
            raise ValueError(f"this job already has an actor named {actor_name!r}")
        if self.mode == "inproc" or in_process:
            if self.mode != "inproc" and not address:
                address = self._data_address(actor_name)
            handle = await self._spawn_inproc(cls_path, main_path, actor_name, kwargs, address)
        else:
            node = node or self.placement.get(actor_name)
            if node is not None and node not in self.nodes:
                node = None  # placed on this machine
            spec = ChildSpec(name=actor_name, cls_path=cls_path, kwargs=kwargs,
                             role=role or cls_path.rpartition(":")[2], main_path=main_path,
                             address=address or ("" if node else self._data_address(actor_name)),
                             sys_path=[p for p in sys.path if p],
                             max_message_bytes=self.limits.max_message_bytes,
                             env={**self.child_env, **(env or {})},
                             node=node or "")
            handle = await self._spawn_process(spec, restart or RestartPolicy(), start_timeout)
        if name:
            await self._register_name(name, handle.address)
        self.handles[actor_name] = handle
        return handle

    async def _register_name(self, name: str, address: str, replace: bool = False) -> None:
        """Record a name here and on every node, where that node's processes look it up."""
        self.run_dir.register_name(name, address, os.getpid(), replace)
        await asyncio.gather(*(link.register_name(name, address) for link in self.nodes.values()))

    async def _spawn_inproc(self, cls_path: str, main_path: str, name: str,
                            kwargs: Any, address: str) -> ActorHandle:
        actor = instantiate(cls_path, main_path, kwargs)
        actor.job, actor.name = self, name
        server = ActorServer(actor, name, limits=self.limits)
        bound = await server.start(address or f"inproc://{self.job_id}/{name}")
        await _call_hook(actor.on_start)
        self._inproc[name] = server
        self.diagnostics.add_probe(f"actor:{name}", server.probe)
        handle = ActorHandle(bound, name, limits=self.limits)
        await handle.connect(10.0)
        return handle

    async def _spawn_process(self, spec: ChildSpec, policy: RestartPolicy,
                             start_timeout: float) -> ActorHandle:
        child = await self._start_child(spec, start_timeout)
        assert child.record is not None
        spec.address = child.record.address  # restarts bind the same address
        handle = ActorHandle(child.record.address, spec.name, limits=self.limits)
        sup = Supervised(child, policy, Watch(self.heartbeat_interval, self.heartbeat_timeout),
                         handle.mark_dead, start_timeout)
        sup.connect_heartbeat(child.record.control)
        self.supervisor.children[spec.name] = sup
        try:
            await handle.connect(start_timeout)
        except ActorUnavailable:
            raise ActorStartError(child.describe_exit("did not answer its first call")) from None
        return handle

    async def spawn_child(self, spec: ChildSpec, make_child: Callable[[ChildSpec, RunDir], Any],
                          restart: RestartPolicy | None = None,
                          start_timeout: float = 60.0) -> ActorHandle:
        """Start and supervise an actor process that ``make_child`` starts (an object with
        ChildProcess's methods: a node agent started over SSH, say)."""
        self._factories[spec.name] = make_child
        handle = await self._spawn_process(spec, restart or RestartPolicy(), start_timeout)
        self.handles[spec.name] = handle
        return handle

    async def _start_child(self, spec: ChildSpec, start_timeout: float) -> ChildProcess:
        if spec.name in self._factories:
            child = self._factories[spec.name](spec, self.run_dir)
        elif spec.node:
            child = self.nodes[spec.node].make_child(spec, self.run_dir)
        else:
            child = ChildProcess(spec, self.run_dir)
        child.start()
        try:
            await child.wait_ready(start_timeout)
        except BaseException:
            child.kill()
            child.cleanup()
            raise
        return child

    async def _restart(self, sup: Supervised) -> None:
        spec = sup.child.spec
        if spec.node and not self.nodes[spec.node].alive:
            # Its machine is gone: start it again on one the placement still has.
            if self.replace_node is None:
                raise ActorStartError(f"{spec.name}: node {spec.node} is gone")
            spec.node = self.replace_node(spec.name)
            spec.node = spec.node if spec.node in self.nodes else ""
            spec.address = "" if spec.node else self._data_address(spec.name)
        child = await self._start_child(spec, sup.start_timeout)
        sup.child = child
        assert child.record is not None
        spec.address = child.record.address
        sup.connect_heartbeat(child.record.control)
        handle = self.handles.get(spec.name)
        if handle is not None and handle.address != child.record.address:
            handle.retarget(child.record.address)
            await self._register_name(spec.name, child.record.address, replace=True)

    async def _stop_child(self, sup: Supervised, grace: float) -> None:
        sup.close_heartbeat()
        child = sup.child
        if child.poll() is None and child.record is not None:
            await send_stop(child.record.control, grace)
            if not await child.wait_exit(grace):
                log.warning("%s did not stop within %.1f s; terminating", child.spec.name, grace)
        await child.terminate(grace)

    def local_actor(self, name: str) -> Actor:
        """The object of an actor this process serves (spawned ``in_process``), for a
        caller in this process that must not go through a socket (APEX's local replay)."""
        if name not in self._inproc:
            raise KeyError(f"{name!r} is not served in this process; spawn it with in_process=True")
        return self._inproc[name].actor

    async def stop_actor(self, name: str, grace: float = 3.0) -> None:
        """Stop one actor started by this job."""
        handle = self.handles.pop(name, None)
        if name in self._inproc:
            server = self._inproc.pop(name)
            await _call_hook(server.actor.on_stop)
            server.close()
        sup = self.supervisor.children.pop(name, None)
        if sup is not None:
            await self._stop_child(sup, grace)
        if handle is not None:
            handle.mark_dead("stopped", permanent=True)
            handle.close()
        self.run_dir.unregister_name(name)

    # --- finding actors ---

    async def get_actor(self, name: str, timeout: float = 10.0) -> ActorHandle:
        """A handle to the actor registered as ``name`` by any process of this job."""
        if name in self.handles:
            handle = self.handles[name]
            moved = self.run_dir.lookup_name(name) if self.nodes or self.mode == "tcp" else None
            if moved and moved != handle.address:  # restarted on another machine
                handle.retarget(moved)
            return handle
        address = await self._lookup(name, timeout)
        handle = ActorHandle(address, name, limits=self.limits)
        try:
            await handle.connect(timeout)
        except BaseException:
            handle.close()  # its socket, or each failed lookup would keep one open
            raise
        self.handles[name] = handle
        return handle

    async def _lookup(self, name: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            address = self.run_dir.lookup_name(name)
            if address:
                return address
            if time.monotonic() > deadline:
                raise KeyError(f"no actor named {name!r} in job {self.job_id} "
                               f"(after waiting {timeout} s)")
            await asyncio.sleep(0.05)

    # --- addresses ---

    def _data_address(self, name: str) -> str:
        return f"tcp://{self.host}:0" if self.mode == "tcp" else self.run_dir.ipc_address(name, "sock")

    def _control_address(self, name: str) -> str:
        return f"tcp://{self.host}:0" if self.mode == "tcp" else self.run_dir.ipc_address(name, "ctl")


def get_actor_sync(name: str, timeout: float = 10.0) -> ActorHandle:
    """A handle usable with ``call_sync``/``tell_sync`` from plain code in any process of
    the job (env code, callbacks), found through ``$RLMESH_RUN_DIR``."""
    job = current_job()
    if job is not None and name in job._inproc:
        return ActorHandle(job._inproc[name].address, name)
    run_dir = job.run_dir if job is not None else _env_run_dir()
    deadline = time.monotonic() + timeout
    while (address := run_dir.lookup_name(name)) is None:
        if time.monotonic() > deadline:
            raise KeyError(f"no actor named {name!r} in job {run_dir.job_id}")
        time.sleep(0.05)
    return ActorHandle(address, name)


def _env_run_dir() -> RunDir:
    path = os.environ.get(ENV_RUN_DIR)
    if not path:
        raise RuntimeError("not inside an rlmesh job: no Job is running in this process and "
                           f"${ENV_RUN_DIR} is not set")
    return RunDir(Path(path))


async def _call_hook(hook: Any) -> None:
    result = hook()
    if asyncio.iscoroutine(result):
        await result


async def send_stop(control: str, timeout: float) -> bool:
    """STOP to a process's control socket; True once it answered (it is stopping)."""
    done = asyncio.get_running_loop().create_future()
    sock = AsyncSocket(configure(zmq.Context.instance().socket(zmq.DEALER), 1 << 20),
                       lambda frames: done.done() or done.set_result(None))
    try:
        connect(sock.sock, control)
        sock.send_nowait(codec.encode(M.make(M.STOP, id=1)))
        await asyncio.wait_for(done, timeout)
        return True
    except asyncio.TimeoutError:
        return False
    finally:
        sock.close()
