"""``make test``'s runner: pytest in a child process, its output passed through as it comes,
and, when pytest dies by a signal (a C library's abort(), a segfault), a short report at
the very end: the signal, the test that was running, the lines printed just before the
crash (a C library's own message is among them unless pytest's capture of the test held
it) and the crashing thread's stack.

A CI log shows its last lines only, and pytest's faulthandler dump of every thread and
extension module fills them: an abort in CI once showed neither the test nor the cause.

    python -m tests.run_tests [pytest arguments]
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

#: Where the test running is named (by this module's hook, loaded in pytest with -p).
TRAIL_ENV = "RLMESH_TEST_TRAIL"
FATAL = "Fatal Python error"
#: The output kept for the report: its end, where faulthandler's dump is.
KEEP_BYTES = 4 << 20
#: Frames of pytest's own machinery, left out of the report's stack.
PLUMBING = ("/_pytest/", "/pluggy/", "<frozen runpy>")


def pytest_runtest_logstart(nodeid, location):
    """pytest's hook (this module is a plugin of the pytest it starts): the test starting."""
    trail = os.environ.get(TRAIL_ENV)
    if trail:
        Path(trail).write_text(nodeid + "\n")


def crash_report(output: bytes, sig: int, test: str) -> str:
    """What to print after a pytest run that died by ``sig``, from its whole ``output``."""
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = f"signal {sig}"
    lines = [f"==== pytest died by {name} ({sig}) ====",
             f"test running: {test or '(none started yet)'}"]
    text = output.decode("utf-8", "replace").splitlines()
    at = next((i for i, line in enumerate(text) if FATAL in line), None)
    if at is None:
        lines.append("(no 'Fatal Python error' dump in the output)")
        return "\n".join(lines)
    lines.append("printed just before the crash:")
    lines += ["  " + line for line in text[max(0, at - 8):at + 1]]
    blocks = _thread_blocks(text[at + 1:])
    for head, frames in blocks:
        if head.startswith("Current thread"):
            ours = [f for f in frames if not any(x in f for x in PLUMBING)] or frames
            lines.append("the crashing thread (most recent call first; pytest's own frames "
                         "left out):")
            lines += ours[:20] + (["  ..."] if len(ours) > 20 else [])
    others = [(head, frames) for head, frames in blocks if not head.startswith("Current")]
    if others:
        lines.append("the other threads, where each was:")
        lines += [f"  {head.split(' (')[0]}: {frames[0].strip() if frames else '?'}"
                  for head, frames in others]
    return "\n".join(lines)


def _thread_blocks(text: list[str]) -> list[tuple[str, list[str]]]:
    """faulthandler's dump as (``Thread 0x... (most recent call first):``, frame lines)."""
    blocks: list[tuple[str, list[str]]] = []
    for line in text:
        if line.startswith(("Thread 0x", "Current thread 0x")):
            blocks.append((line, []))
        elif line.startswith("  ") and blocks:
            blocks[-1][1].append(line)
        elif blocks and line.strip():
            break  # past the stacks (the extension modules' list)
    return blocks


def main(argv: list[str]) -> int:
    from rlmesh.runtime.process import die_with  # not on import: pytest loads this as a plugin

    fd, trail_name = tempfile.mkstemp(prefix="rlmesh-test-trail-")
    os.close(fd)
    trail = Path(trail_name)
    env = {**os.environ, TRAIL_ENV: str(trail)}
    captured = bytearray()
    # Ctrl-C reaches pytest itself (same process group): it reports and exits, then so do we.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        proc = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "tests.run_tests", *argv],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                preexec_fn=die_with(os.getpid(), signal.SIGTERM))
        assert proc.stdout is not None
        out = sys.stdout.buffer
        while chunk := os.read(proc.stdout.fileno(), 65536):
            out.write(chunk)
            out.flush()
            captured += chunk
            if len(captured) > 2 * KEEP_BYTES:
                del captured[:-KEEP_BYTES]
        rc = proc.wait()
        if rc < 0:
            test = trail.read_text().strip() if trail.exists() else ""
            print("\n" + crash_report(bytes(captured), -rc, test), flush=True)
            return 128 - rc
        return rc
    finally:
        signal.signal(signal.SIGINT, previous)
        trail.unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
