"""Every process's log in one place: ``LogTail`` follows the child processes' log files
(``<run dir>/logs/<name>.log``) and hands their lines to this process's logging, each
record marked with its process's name (``role``); ``RoleFilter`` marks this process's own
records ("driver"), so one format shows ``[env_runner-1]`` and ``[driver]`` alike."""

from __future__ import annotations

import logging
import re
import threading
from pathlib import Path

POLL_S = 0.2
# What bootstrap.py writes: "<date> <time>,<ms> LEVEL [name] logger: message".
_LINE = re.compile(r"^\S+ \S+ (DEBUG|INFO|WARNING|ERROR|CRITICAL) \[([^\]]+)\] ([^:]+): (.*)$")


class RoleFilter(logging.Filter):
    """Gives a record without a ``role`` this process's (a handler's filter)."""

    def __init__(self, role: str = "driver") -> None:
        super().__init__()
        self.role = role

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "role"):
            record.role = self.role
        return True


def level_number(level: str | int) -> int:
    if isinstance(level, int):
        return level
    return logging.getLevelName({"WARN": "WARNING"}.get(level.upper(), level.upper()))


class LogTail:
    """A thread re-emitting the lines of the log files in ``logs_dir`` at ``level`` or
    above; lines that are not log records (a traceback's) go with the record before them."""

    def __init__(self, logs_dir: str | Path, level: str | int) -> None:
        self.logs_dir = Path(logs_dir)
        self.level = level_number(level)
        self._offsets: dict[Path, int] = {}
        self._partial: dict[Path, bytes] = {}
        self._last_level: dict[Path, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rlmesh.logtail", daemon=True)

    def start(self) -> "LogTail":
        self._thread.start()
        return self

    def stop(self) -> None:
        """Read what is left, then stop."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        self.poll()

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            try:
                self.poll()
            except Exception:  # a log line must never take the run down
                logging.getLogger(__name__).debug("log tail failed", exc_info=True)

    def poll(self) -> None:
        """Emit the complete lines written since the last call."""
        for path in sorted(self.logs_dir.glob("*.log")):
            try:
                with open(path, "rb") as f:
                    f.seek(self._offsets.get(path, 0))
                    data = f.read()
            except OSError:
                continue
            self._offsets[path] = self._offsets.get(path, 0) + len(data)
            data = self._partial.pop(path, b"") + data
            *lines, rest = data.split(b"\n")
            if rest:
                self._partial[path] = rest
            for line in lines:
                self._emit(path, line.decode("utf-8", "replace").rstrip())

    def _emit(self, path: Path, line: str) -> None:
        if not line:
            return
        match = _LINE.match(line)
        if match:
            level_name, role, name, message = match.groups()
            level = self._last_level[path] = logging.getLevelName(level_name)
        else:  # a continuation (traceback) or a print
            level = self._last_level.get(path, logging.INFO)
            role, name, message = path.stem, "rlmesh.output", line
        if level < self.level:
            return
        record = logging.makeLogRecord({"name": name, "levelno": level,
                                        "levelname": logging.getLevelName(level),
                                        "msg": message, "role": role})
        logging.getLogger(name).handle(record)


def attach_log_file(path: str | Path, level: str | int) -> logging.Handler:
    """Every record at ``level`` or above (every process's, with LogTail) also into
    ``path``, with time and role."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setLevel(level_number(level))
    handler.addFilter(RoleFilter())
    handler.setFormatter(logging.Formatter(
        "%(asctime)s %(levelname)s [%(role)s] %(name)s: %(message)s"))
    logging.getLogger().addHandler(handler)
    return handler
