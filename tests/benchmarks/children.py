"""The benchmarks' child processes die with the benchmark: one killed outright (kill -9, a
closed terminal) takes its ``rlmesh train`` and peer runs with it instead of leaving them to
finish on a machine someone is measuring on. Linux's parent-death signal
(``rlmesh.runtime.process.die_with``); elsewhere a child outlives a killed benchmark as before."""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Any

from rlmesh.runtime.process import die_with


def run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess:
    """``subprocess.run`` of a child that gets SIGTERM when this process dies (``rlmesh
    train`` stops its actors on it; a peer simply exits). Start children from the main thread:
    Linux signals when the forking thread ends."""
    return subprocess.run(cmd, preexec_fn=die_with(os.getpid(), signal.SIGTERM), **kwargs)


def popen(cmd: list[str], **kwargs: Any) -> subprocess.Popen:
    """``subprocess.Popen`` of a child that gets SIGTERM when this process dies."""
    return subprocess.Popen(cmd, preexec_fn=die_with(os.getpid(), signal.SIGTERM), **kwargs)
