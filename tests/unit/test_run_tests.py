"""make test's runner (tests/run_tests.py) on a real pytest: a run that passes or fails
keeps pytest's exit code and output; one that dies by abort() ends with a report naming
the signal, the test and where it was."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

TESTS = '''
import ctypes, os, threading

def test_passes():
    pass

def test_fails():
    assert 1 == 2

def test_aborts():
    threading.Thread(target=threading.Event().wait, name="waiter", daemon=True).start()
    ctypes.CDLL(None).abort()
'''


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_cases.py").write_text(TESTS)
    # The inner run's rootdir is its own folder, wherever the clone and the temporary
    # folders are: without an ini file beside the test, pytest derived it from the common
    # ancestor of the paths, and a clone under /tmp named the test by a longer path.
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    return subprocess.run([sys.executable, "-m", "tests.run_tests", "-q", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), str(tmp_path / "test_cases.py"), *args],
                          cwd=REPO, capture_output=True, text=True, timeout=120)


def test_a_passing_or_failing_run_keeps_pytests_exit_code_and_output(tmp_path):
    passed = run(tmp_path, "-k", "passes")
    assert passed.returncode == 0 and "1 passed" in passed.stdout
    failed = run(tmp_path, "-k", "passes or fails")
    assert failed.returncode == 1 and "1 failed, 1 passed" in failed.stdout
    assert "pytest died" not in failed.stdout


def test_a_run_killed_by_abort_ends_with_the_test_and_its_stack(tmp_path):
    out = run(tmp_path)
    assert out.returncode == 134, out.stdout[-2000:]
    report = out.stdout.split("==== pytest died by SIGABRT (6) ====", 1)[1]
    assert "test running: test_cases.py::test_aborts" in report
    assert "Fatal Python error: Aborted" in report
    crashing = report.split("the crashing thread", 1)[1].split("the other threads", 1)[0]
    assert "test_cases.py\", line 12 in test_aborts" in crashing
    assert "_pytest" not in crashing and "pluggy" not in crashing
    assert "threading.py" in report.split("the other threads", 1)[1]  # the waiter
