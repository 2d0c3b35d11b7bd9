"""Entry point of an actor process: ``python -m rlmesh.runtime.bootstrap SPEC LIFELINE_FD PPID``
(or ``--wait LIFELINE_FD PPID [MODULE...]``: imports first, the spec from stdin).
Either way stdin, a pipe from the parent, brings the objects it hands over (handed.py), in a
first frame and, while the process lives, in frames for objects made later.

Ties the process's life to its parent, builds the actor from its spec, serves it, and
registers it in the run directory once it is ready.
"""

from __future__ import annotations

import asyncio
import ctypes
import faulthandler
import gc
import logging
import os
import signal
import sys
from pathlib import Path


def die_with_parent(parent_pid: int) -> None:
    """Ask Linux for SIGKILL when the parent dies; the lifeline pipe covers other systems."""
    if sys.platform.startswith("linux"):
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent died before we asked
        os._exit(1)


def keep_receive_buffers() -> None:
    """Stop glibc from handing large receive buffers back to the OS after every message.

    libzmq's I/O thread allocates each large incoming message; with glibc's defaults a
    multi-MB buffer is mmap'd and unmapped per message, or trimmed off the heap, so every
    message page-faults its memory in again (measured: 1 MB streams ran at half speed).
    Keeping up to 256 MB of freed heap costs at most what the credit windows let in.
    libzmq's I/O thread allocates from a heap of its own arena (64 MB at most); when one of
    those heaps emptied, glibc unmapped it whatever the trim threshold, and the next
    messages faulted their pages in again: 8 MB streams ran at 0.3-0.5x raw. A top pad of
    one heap's size keeps emptied heaps mapped (measured: 2.0 -> 3.9 GB/s).
    ``RLMESH_MALLOC_TUNING=0`` turns this off.
    """
    if not sys.platform.startswith("linux") or os.environ.get("RLMESH_MALLOC_TUNING") == "0":
        return
    M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(M_MMAP_THRESHOLD, 32 << 20)  # glibc's maximum on 64-bit
        libc.mallopt(M_TRIM_THRESHOLD, 256 << 20)
        libc.mallopt(M_TOP_PAD, 64 << 20)  # glibc's per-thread heap size on 64-bit
    except (OSError, AttributeError):
        pass  # not glibc (musl, ...): nothing to tune


async def serve(spec_path: Path, lifeline_fd: int) -> None:
    from ..wire.sockets import scheme_of
    from .actor import ActorServer, spin_wait_of
    from . import handed
    from .import_path import instantiate
    from .job import Job, _call_hook
    from .process import ChildSpec
    from .run_dir import RunDir

    spec = ChildSpec.from_bytes(spec_path.read_bytes())
    for path in reversed(spec.sys_path):
        if path not in sys.path:
            sys.path.insert(0, path)
    handed.load()  # after sys.path: a handed closure may name the user's modules
    handed.listen(sys.stdin.buffer.raw)  # objects the parent makes later (foreach_worker's)
    mode = scheme_of(spec.address)
    job = Job(mode, name=spec.name, role=spec.role, run_dir=RunDir(spec_path.parent.parent),
              max_message_bytes=spec.max_message_bytes, lifeline_fd=lifeline_fd)
    await job.start()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, job.request_stop)
    actor = instantiate(spec.cls_path, spec.main_path, spec.kwargs)
    actor.job, actor.name = job, spec.name
    server = ActorServer(actor, spec.name, limits=job.limits)
    address = await server.start(spec.address, spin_wait=spin_wait_of(actor))
    job.diagnostics.add_probe("server", server.probe)
    await _call_hook(actor.on_start)
    # What start-up created lives as long as the process: keep it out of every collection.
    gc.freeze()
    job.register_self(address=address, cls=spec.cls_path)
    logging.getLogger("rlmesh.runtime").debug("%s (%s) serving on %s, pid %d", spec.name,
                                              spec.cls_path, address, os.getpid())
    try:
        await job.wait_stopped()
        await _call_hook(actor.on_stop)
    finally:
        server.close()
        await job.shutdown()


def wait_for_spec(parent_pid: int, preload: list[str]) -> str:
    """A warm interpreter (process.WarmProcess): imports first, then the spec path and log
    path from stdin, and the handed objects after them; this process's output goes to that
    log from then on."""
    import importlib

    from . import handed

    die_with_parent(parent_pid)
    for module in preload:
        importlib.import_module(module)
    stdin = sys.stdin.buffer.raw  # unbuffered: the listener thread reads on from here
    spec_line, log_line = stdin.readline(), stdin.readline()
    if not log_line.endswith(b"\n"):  # discarded unused: end of file
        os._exit(0)
    spec_path, log_path = spec_line.decode().rstrip("\n"), log_line.decode().rstrip("\n")
    handed.receive(handed.read_frame(stdin) or b"")  # written with the two lines
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    from .run_dir import ENV_RUN_DIR

    os.environ[ENV_RUN_DIR] = str(Path(spec_path).parent.parent)
    return spec_path


def main() -> None:
    if sys.argv[1] == "--wait":
        lifeline_fd, parent_pid = int(sys.argv[2]), int(sys.argv[3])
        spec_path = wait_for_spec(parent_pid, sys.argv[4:])
    else:
        spec_path, lifeline_fd, parent_pid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
        die_with_parent(parent_pid)
        from . import handed

        handed.receive(handed.read_frame(sys.stdin.buffer.raw) or b"")  # the first frame
    faulthandler.enable()  # a crash in C (SIGSEGV, ...) leaves its stacks in the log
    keep_receive_buffers()
    from rlmesh.runtime.logtail import ChildFormatter

    handler = logging.StreamHandler()
    handler.setFormatter(ChildFormatter(
        f"%(asctime)s %(levelname)s [{Path(spec_path).name[1:-5]}] %(name)s: %(message)s"))
    logging.basicConfig(level=os.environ.get("RLMESH_LOG_LEVEL", "INFO"), handlers=[handler])
    try:
        import uvloop
    except ImportError:  # uvloop is a dependency; this only keeps exotic platforms going
        uvloop = None
    coro = serve(Path(spec_path), lifeline_fd)
    if uvloop is not None:
        uvloop.run(coro)
    else:
        asyncio.run(coro)
    # Stopped and shut down: the parent waits for this exit, and an interpreter that
    # imported torch (a learner) takes over a second to tear down.
    from ..quick_exit import exit_process

    exit_process(0)


if __name__ == "__main__":
    main()
