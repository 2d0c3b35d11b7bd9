"""The benchmarks' child processes die with the benchmark: one killed outright (kill -9, a
closed terminal) takes its ``rlmesh train`` and peer runs with it instead of leaving them to
finish on a machine someone is measuring on. Linux's parent-death signal; elsewhere a child
outlives a killed benchmark as before."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from typing import Any, Callable

PR_SET_PDEATHSIG = 1


def _prctl() -> Callable[..., int] | None:
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


_PRCTL = _prctl()  # looked up once here: between fork and exec the child should do little


def dies_with_me() -> Callable[[], None]:
    """A ``preexec_fn``: the child gets SIGTERM when this process dies (``rlmesh train``
    stops its actors on it; a peer simply exits). Linux sends it when the forking *thread*
    ends, so start children from a thread that lives as long as the benchmark (the main
    one, in every benchmark here)."""
    parent = os.getpid()

    def preexec() -> None:
        if _PRCTL is not None:
            _PRCTL(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:  # the benchmark died before prctl took hold
            os._exit(1)

    return preexec


def run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess:
    """``subprocess.run`` of a child that dies with this process."""
    return subprocess.run(cmd, preexec_fn=dies_with_me(), **kwargs)


def popen(cmd: list[str], **kwargs: Any) -> subprocess.Popen:
    """``subprocess.Popen`` of a child that dies with this process."""
    return subprocess.Popen(cmd, preexec_fn=dies_with_me(), **kwargs)
