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
TRACEBACK_HEAD = "Traceback (most recent call last)"
# How a child's log file marks a record logged with ``extra={"detail": True}``.
DETAIL_TAG = "[detail] "
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


class NoDetailFilter(logging.Filter):
    """For the console: drops the lines of a traceback logged at ERROR by another process
    or with ``extra={"detail": True}``; they stay in the trial's log file, and the error's
    own line says what happened. A failing learner's traceback was shown three times on
    the console."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(record, "detail", False)


class ChildFormatter(logging.Formatter):
    """A child process's log lines, with ``DETAIL_TAG`` before a ``detail`` record's message
    so that ``LogTail`` keeps it off the console."""

    def format(self, record: logging.LogRecord) -> str:
        if getattr(record, "detail", False):
            record = logging.makeLogRecord({**record.__dict__, "msg": DETAIL_TAG + str(record.msg)})
        return super().format(record)


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
        self._lines = LogLines()
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
        level, detail, match = self._lines.read(path, line)
        if match:
            _, role, name, message = match.groups()
            message = message.removeprefix(DETAIL_TAG)
        else:  # a continuation (traceback) or a print
            role, name, message = path.stem, "rlmesh.output", line
        if level < self.level:
            return
        record = logging.makeLogRecord({"name": name, "levelno": level,
                                        "levelname": logging.getLevelName(level),
                                        "msg": message, "role": role, "detail": detail})
        logging.getLogger(name).handle(record)


class LogLines:
    """Reads child log lines as they come, per source (a file, a node's actor): each line's
    level, whether it is ``detail`` (for the log files, not the console), and its match of
    the record format (None for a continuation line, which goes with the record before)."""

    def __init__(self) -> None:
        self._level: dict[object, int] = {}
        self._detail: dict[object, bool] = {}

    def read(self, source: object, line: str) -> tuple[int, bool, re.Match | None]:
        match = _LINE.match(line)
        if match:
            level = self._level[source] = logging.getLevelName(match.group(1))
            message = match.group(4)
            detail = self._detail[source] = (message.startswith(DETAIL_TAG)
                                             or _is_detail(True, level, message))
            return level, detail, match
        level = self._level.get(source, logging.INFO)
        return level, self._detail.get(source, False) or _is_detail(False, level, line), None


def _is_detail(is_record: bool, level: int, message: str) -> bool:
    """A line of a traceback logged at ERROR: its continuation lines, and its first."""
    return level >= logging.ERROR and (not is_record or message.startswith(TRACEBACK_HEAD))


class QuietFileHandler(logging.FileHandler):
    """A log file that stops, without a word, once it cannot be written (a full disk): the
    run's own error says so in one line, and logging's "--- Logging error ---" traceback on
    stderr, printed for each record after, would bury that line."""

    def handleError(self, record: logging.LogRecord) -> None:
        logging.getLogger().removeHandler(self)
        try:
            self.close()
        except OSError:
            pass


def attach_log_file(path: str | Path, level: str | int) -> logging.Handler:
    """Every record at ``level`` or above (every process's, with LogTail) also into
    ``path``, with time and role."""
    handler = QuietFileHandler(path, encoding="utf-8")
    handler.setLevel(level_number(level))
    handler.addFilter(RoleFilter())
    handler.setFormatter(logging.Formatter(
        "%(asctime)s %(levelname)s [%(role)s] %(name)s: %(message)s"))
    logging.getLogger().addHandler(handler)
    return handler
