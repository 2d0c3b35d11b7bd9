"""The benchmarks' children die with the benchmark (tests/benchmarks/children.py): a bench
killed outright must not leave an ``rlmesh train`` running on the machine it measures."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.benchmarks import children

ROOT = Path(__file__).resolve().parents[2]

# A stand-in benchmark: starts a long child through `children`, prints its pid, waits.
BENCH = """
import sys, time
from tests.benchmarks import children
child = children.popen([sys.executable, "-c", "import time; time.sleep(120)"])
print(child.pid, flush=True)
time.sleep(120)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux's")
def test_a_child_dies_when_its_benchmark_is_killed_outright():
    bench = subprocess.Popen([sys.executable, "-c", BENCH], cwd=ROOT, stdout=subprocess.PIPE,
                             text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    child = None
    try:
        assert bench.stdout is not None
        child = psutil.Process(int(bench.stdout.readline()))
        assert child.is_running() and child.ppid() == bench.pid
        bench.send_signal(signal.SIGKILL)
        bench.wait(10)
        child.wait(10)  # psutil.TimeoutExpired if it outlived the benchmark
        assert not child.is_running()
    finally:
        bench.kill()
        if child is not None and child.is_running():
            child.kill()


def test_run_returns_the_childs_result():
    proc = children.run([sys.executable, "-c", "print('ok'); raise SystemExit(3)"],
                        capture_output=True, text=True)
    assert (proc.returncode, proc.stdout) == (3, "ok\n")
