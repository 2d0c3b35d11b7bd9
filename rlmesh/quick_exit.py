"""Ending a process whose work is done without the interpreter's teardown.

Tearing down an interpreter that imported torch took 1.3 s of every ``rlmesh train``
(measured: atexit to process end, nothing of it useful); only the standard library here.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn


def exit_process(code: int) -> NoReturn:
    """Exit with ``code`` once the exit handlers ran (they close log files, TensorBoard's
    writer, temp folders) and stdout and stderr are flushed, skipping the freeing of every
    module and object, which nothing outside the process sees. While a thread that is not a
    daemon still runs, the usual exit instead: Python waits for it."""
    main = threading.main_thread()
    if any(t is not main and not t.daemon and t.is_alive() for t in threading.enumerate()):
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # closed or replaced by None
            pass
    os._exit(code)
