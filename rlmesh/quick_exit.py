"""Ending a process whose work is done without the interpreter's teardown.

Tearing down an interpreter that imported torch took 1.2-1.4 s of every ``rlmesh train``
(measured from its last atexit handler to its end, at load 5 on 2 cores; os._exit there:
0.05 s). Only the standard library here.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn


def exit_process(code: int) -> NoReturn:
    """Exit with ``code`` once the atexit handlers ran (logging's flush, finalizers such as
    temporary folders', the user's) and stdout and stderr are flushed, skipping the freeing
    of every module and object, which nothing outside the process sees. While a thread that
    is not a daemon still runs, the usual exit instead: Python waits for it."""
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
