"""Starting and stopping actor processes on this machine.

A child is a fresh interpreter (spawn, never fork: CUDA stays safe) in its own session,
holding the read end of a lifeline pipe and a parent-death signal, so it cannot outlive
its parent. Its output goes to a log file whose last lines are reported when it dies.
Its stdin is a pipe from the parent alone: the spawn channel that hands it the objects
without an import path (handed.py), kept open for those made later, closed at its end.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import msgpack

from ..wire import codec
from .handed import Channel, open_channel
from .run_dir import ENV_RUN_DIR, ProcessRecord, RunDir


PR_SET_PDEATHSIG = 1


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                      ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


_PRCTL = _load_prctl()  # looked up here: the child between fork and exec should do little


def die_with(parent: int, sig: int = signal.SIGKILL) -> Callable[[], None]:
    """A ``preexec_fn``: the child gets ``sig`` when ``parent`` dies (Linux; elsewhere only
    a pipe closing can tell it). Linux sends it when the *thread* that forked the child
    ends, so fork from a thread that lives as long as the parent."""

    def preexec() -> None:
        if _PRCTL is not None:
            _PRCTL(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took hold
            os._exit(1)

    return preexec

# Numeric libraries start a thread per core by default; in a mesh of many processes on few
# cores those threads only compete (OpenBLAS's spin-waiting ones took 4% of a core each in
# every actor, doing nothing). One each, unless the user's environment or the actor's
# ``env`` says otherwise (a learner wanting torch threads passes OMP_NUM_THREADS).
ONE_THREAD_PER_LIBRARY = {
    "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
}


def process_cores() -> int:
    """The numeric threads one process may use alone, as torch's default counts them:
    ``OMP_NUM_THREADS`` where set, else the physical cores, no more than the CPUs this
    process may run on (a container's or taskset's affinity)."""
    told = os.environ.get("OMP_NUM_THREADS", "").strip()
    if told.isdigit() and int(told) > 0:
        return int(told)
    import psutil

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(cpus or 1, psutil.cpu_count(logical=False) or cpus or 1))


class ActorStartError(RuntimeError):
    """A child process exited or timed out before it was ready."""


@dataclass
class ChildSpec:
    """Everything a child needs to construct its actor; encoded without pickle."""

    name: str
    cls_path: str  # "package.module:Class"
    kwargs: dict[str, Any] = field(default_factory=dict)  # constructor arguments, by name
    role: str = "actor"
    address: str = ""  # where to bind; resolved after the first start
    main_path: str = ""  # the driver's script, when the class lives in __main__
    sys_path: list[str] = field(default_factory=list)
    max_message_bytes: int = codec.DEFAULT_MAX_MESSAGE_BYTES
    env: dict[str, str] = field(default_factory=dict)  # set in the child's environment
    node: str = ""  # the machine it runs on ("": this one)

    def to_bytes(self) -> bytes:
        frames = codec.encode(self.__dict__)
        return msgpack.packb([bytes(f) for f in frames], use_bin_type=True)

    @classmethod
    def from_bytes(cls, data: bytes) -> "ChildSpec":
        return cls(**codec.decode(msgpack.unpackb(data, raw=False)))


def tail(path: Path, lines: int = 40) -> list[str]:
    """The last ``lines`` lines of a log file."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 16384))
            data = fh.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return []
    return data.splitlines()[-lines:]


def describe_exit(spec: ChildSpec, code: int | None, log_path: Path, what: str,
                  where: str = "") -> str:
    """"actor 'x' (pkg:Cls) <where> <what> (exit code N); last output ...": what a child's
    end event and start errors say (``where``: " on node n2" for a child elsewhere)."""
    how = ""
    if code is not None:
        how = (f" (killed by {signal.Signals(-code).name})" if code < 0
               else f" (exit code {code})")
    lines = "\n".join("    " + line for line in tail(log_path))
    return (f"actor {spec.name!r} ({spec.cls_path}){where} {what}{how}; "
            f"last output, from {log_path}:\n{lines or '    (nothing)'}")


async def wait_for_exit(poll: Callable[[], int | None], timeout: float,
                        step: float = 0.02) -> bool:
    """Whether ``poll()`` gives an exit code within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while poll() is None:
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(step)
    return True


def feed(channel: Channel, data: bytes) -> None:
    """Write ``data``, a child's first bytes, on its channel (left open); what the pipe
    cannot hold at once (64 KiB) is written by a thread, so the parent never waits on a
    child's start-up. The channel's lock is held from here, so later frames follow it."""
    channel.lock.acquire()
    if len(data) <= 65536:
        if not channel.write(data, locked=True):
            raise BrokenPipeError("the child's stdin is closed")
        return
    import threading

    threading.Thread(target=channel.write, args=(data, True), name="spawn-channel",
                     daemon=True).start()


def child_env(extra: dict[str, str]) -> dict[str, str]:
    """The environment of an actor process (its run directory apart)."""
    return {**ONE_THREAD_PER_LIBRARY, **os.environ, **extra, "PYTHONUNBUFFERED": "1"}


class WarmProcess:
    """An interpreter started before its actor is known, so that its imports overlap the
    parent's own (``rlmesh train`` starts its env runners' interpreters before it imports
    torch). It imports the runtime and ``preload``, then waits on stdin for a spec path
    and a log path (``bootstrap --wait``); end of file instead ends it."""

    def __init__(self, extra_env: dict[str, str], preload: list[str]) -> None:
        self.env = child_env(extra_env)
        read_fd, self.lifeline_w = os.pipe()
        try:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "rlmesh.runtime.bootstrap", "--wait", str(read_fd),
                 str(os.getpid()), *preload],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                pass_fds=(read_fd,), start_new_session=True, env=self.env)
        finally:
            os.close(read_fd)

    def hand_over(self, spec_path: Path, log_path: Path) -> Channel | None:
        """Make it the actor of ``spec_path``: its channel, or None if it has died (an
        import failed)."""
        assert self.popen.stdin is not None
        channel, first = open_channel(self.popen.stdin)
        try:
            feed(channel, f"{spec_path}\n{log_path}\n".encode() + first)
        except OSError:  # BrokenPipeError
            channel.close()
            return None
        return channel

    def discard(self) -> None:
        """End it unused: end of file on its stdin, its lifeline closed."""
        try:
            if self.popen.stdin is not None:
                self.popen.stdin.close()
        except OSError:  # it had died: the buffered bytes found no reader
            pass
        os.close(self.lifeline_w)
        try:
            self.popen.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait()


_warm: list[WarmProcess] = []


def prestart(count: int, extra_env: dict[str, str], preload: list[str]) -> None:
    """Start ``count`` warm interpreters; the next actor processes started here with the
    same environment take them over (see WarmProcess); ``discard_warm`` ends the rest."""
    _warm.extend(WarmProcess(extra_env, preload) for _ in range(count))


def _take_warm(env: dict[str, str]) -> WarmProcess | None:
    """A live warm interpreter started with ``env`` (else the actor would run in an
    environment it was not given), taken out of the pool."""
    for warm in list(_warm):
        if warm.popen.poll() is not None:
            _warm.remove(warm)
            warm.discard()
        elif warm.env == env:
            _warm.remove(warm)
            return warm
    return None


def discard_warm() -> None:
    """End every warm interpreter no actor took."""
    while _warm:
        _warm.pop().discard()


class ChildProcess:
    """One started child: its Popen, its lifeline, its log."""

    def __init__(self, spec: ChildSpec, run_dir: RunDir) -> None:
        self.spec = spec
        self.run_dir = run_dir
        self.log_path = run_dir.log_path(spec.name)
        self.popen: subprocess.Popen[bytes] | None = None
        self._lifeline_w: int | None = None
        self.record: ProcessRecord | None = None
        self.channel: Channel | None = None  # its stdin, for objects made later

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def start(self) -> None:
        if self.channel is not None:  # a restart: the old pipe's reader is gone
            self.channel.close()
        spec_path = self.run_dir.path / "procs" / f".{self.spec.name}.spec"
        spec_path.write_bytes(self.spec.to_bytes())
        env = child_env(self.spec.env)
        warm = _take_warm(env)
        channel = warm.hand_over(spec_path, self.log_path) if warm is not None else None
        if channel is not None:
            # Already past its imports: it becomes this actor.
            self.popen, self._lifeline_w, self.channel = warm.popen, warm.lifeline_w, channel
            return
        if warm is not None:
            warm.discard()
        read_fd, self._lifeline_w = os.pipe()  # both ends non-inheritable by default
        env[ENV_RUN_DIR] = str(self.run_dir.path)
        log = open(self.log_path, "ab")
        try:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "rlmesh.runtime.bootstrap", str(spec_path),
                 str(read_fd), str(os.getpid())],
                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                pass_fds=(read_fd,), start_new_session=True, env=env,
            )
        finally:
            os.close(read_fd)
            log.close()
        assert self.popen.stdin is not None
        self.channel, first = open_channel(self.popen.stdin)
        try:
            feed(self.channel, first)
        except OSError:  # it died at once: wait_ready reports how
            pass

    def poll(self) -> int | None:
        return None if self.popen is None else self.popen.poll()

    async def wait_ready(self, timeout: float) -> ProcessRecord:
        """Wait for the child's process record; fail early with its output if it exits."""
        deadline = time.monotonic() + timeout
        while True:
            rec = self.run_dir.read_process(self.spec.name)
            if rec is not None and rec.pid == self.pid:
                self.record = rec
                return rec
            code = self.poll()
            if code is not None:
                raise ActorStartError(self.describe_exit("exited during start-up"))
            if time.monotonic() > deadline:
                self.kill()
                raise ActorStartError(self.describe_exit(f"not ready after {timeout} s; killed"))
            await asyncio.sleep(0.01)

    def describe_exit(self, what: str) -> str:
        return describe_exit(self.spec, self.poll(), self.log_path, what)

    def signal(self, sig: int) -> None:
        """Signal the child process alone."""
        if self.popen is not None and self.popen.poll() is None:
            try:
                os.kill(self.popen.pid, sig)
            except ProcessLookupError:
                pass

    def signal_group(self, sig: int) -> None:
        if self.popen is None:
            return
        try:
            os.killpg(self.popen.pid, sig)  # the child leads its own session and group
        except (ProcessLookupError, PermissionError):
            pass

    def kill(self) -> None:
        self.signal_group(signal.SIGKILL)
        self._reap(2.0)

    async def wait_exit(self, timeout: float) -> bool:
        return await wait_for_exit(self.poll, timeout)

    async def terminate(self, grace: float = 3.0) -> None:
        """SIGTERM the child's group, then SIGKILL it if still there after ``grace``."""
        if self.poll() is None:
            self.signal_group(signal.SIGTERM)
            if not await self.wait_exit(grace):
                self.signal_group(signal.SIGKILL)
                await self.wait_exit(5.0)
        # Whatever the child left in its group (a grandchild that ignored SIGTERM) goes too.
        self.signal_group(signal.SIGKILL)
        self.cleanup()

    def _reap(self, timeout: float) -> None:
        if self.popen is not None:
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                pass

    def cleanup(self) -> None:
        if self.channel is not None:
            self.channel.close()
            self.channel = None
        if self._lifeline_w is not None:
            os.close(self._lifeline_w)
            self._lifeline_w = None
        self.run_dir.remove_process(self.spec.name)
