"""Readers of one value of a cluster file: each returns it checked, or raises _Invalid naming
its key (a dotted path such as ``nodes[2].port``); parse_cluster adds the file's name."""

from __future__ import annotations

import difflib
import math
import re
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping, Sequence

BUILTIN_RESOURCES = ("CPU", "GPU", "memory")  # detected on a node when the file leaves them out
NODE_RESOURCE = "node:"  # every node offers "node:<name>" = 1, so a bundle can be pinned to it
TOP_KEYS = ("cluster_name", "provider", "ssh", "slurm", "kubernetes", "torchrun", "head", "nodes",
            "setup_commands", "sync", "env", "security", "job")

# Hosts and users reach ssh's command line: a leading "-" would be read as an option there.
_HOST = re.compile(r"[A-Za-z0-9_:][A-Za-z0-9_.:%-]*\Z")
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\Z")
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+\Z")


class _Invalid(Exception):
    """Raised by the readers below; parse_cluster adds the file's name."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(reason)
        self.key, self.reason = key, reason


def _join(key: str, name: str) -> str:
    name = name if _BARE_KEY.match(name) else f'"{name}"'
    return f"{key}.{name}" if key else name


def _show(value: Any) -> str:
    kind = {bool: "a boolean", int: "an integer", float: "a float", str: "a string",
            list: "an array", dict: "a table"}.get(type(value), type(value).__name__)
    if isinstance(value, (list, dict)):
        return kind
    text = repr(value)
    return f"{text if len(text) <= 60 else text[:57] + '...'} ({kind})"


def _toml_text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _hint(key: str, allowed: Sequence[str]) -> str:
    near = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    return f"; did you mean {near[0]!r}?" if near else f"; expected one of {', '.join(allowed)}"


def _table(value: Any, key: str, allowed: Sequence[str] | None,
           required: Sequence[str] = ()) -> dict[str, Any]:
    """``value`` as a table whose keys are among ``allowed`` (None: any) and include
    ``required``."""
    if not isinstance(value, dict):
        raise _Invalid(key or "(top level)", f"expected a table, got {_show(value)}")
    for name in value:
        if allowed is not None and name not in allowed:
            hint = _hint(name, allowed)
            if key and name in TOP_KEYS:  # TOML's trap: a key after [table] belongs to it
                hint = (f"; {name} is a top-level key, which TOML reads as one only before "
                        "the first [table] header: move it up")
            raise _Invalid(_join(key, name), "unknown key" + hint)
    for name in required:
        if name not in value:
            raise _Invalid(_join(key, name), "missing, and required" + _misplaced(value, name))
    return value


def _misplaced(data: dict[str, Any], name: str) -> str:
    """Where a missing top-level key sits instead: under the table whose header precedes it."""
    for table, value in data.items():
        last = value[-1] if isinstance(value, list) and value else value
        if isinstance(last, dict) and name in last:
            where = f"[[{table}]]" if isinstance(value, list) else f"[{table}]"
            return (f"; there is one under {where}, but TOML reads a key after a [table] "
                    "header as that table's: move it above the first header")
    return ""


def _array(value: Any, key: str) -> list[Any]:
    if not isinstance(value, list):
        raise _Invalid(key, f"expected an array (as [[{key}]] tables), got {_show(value)}")
    return value


def _optional(data: dict[str, Any], name: str, key: str, read: Any) -> Any:
    return read(data[name], _join(key, name)) if name in data else None


def _string(value: Any, key: str, pattern: re.Pattern[str] | None = None,
            expected: str = "a string") -> str:
    if not isinstance(value, str) or (pattern is not None and not pattern.match(value)):
        raise _Invalid(key, f"expected {expected}, got {_show(value)}")
    return value


def _strings(value: Any, key: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise _Invalid(key, f"expected an array of strings, got {_show(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            raise _Invalid(f"{key}[{i}]", f"expected a non-empty string, got {_show(item)}")
    return tuple(value)


def _boolean(value: Any, key: str) -> bool:
    if not isinstance(value, bool):
        raise _Invalid(key, f"expected true or false, got {_show(value)}")
    return value


def _port(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise _Invalid(key, f"expected a port number from 1 to 65535, got {_show(value)}")
    return value


def _host(value: Any, key: str) -> str:
    return _string(value, key, _HOST, "a host name or an IP address")


def _user(value: Any, key: str) -> str:
    return _string(value, key, _USER, "a user name (letters, digits, '.', '-', '_')")


def _python(value: Any, key: str) -> str:
    if not isinstance(value, str) or not value.strip() or "\n" in value or "\0" in value:
        raise _Invalid(key, f"expected the command of a Python interpreter on the nodes, e.g. "
                       f"'python3' or '/opt/venv/bin/python', got {_show(value)}")
    return value


def _folder_name(value: Any, key: str) -> str:
    text = _string(value, key)
    if not text or "/" in text or "\\" in text or "\0" in text or text in (".", ".."):
        raise _Invalid(key, f"expected a folder name (no '/'), got {_show(value)}")
    return text


def _path(value: Any, key: str, base: Path) -> Path:
    text = _string(value, key)
    if not text or "\0" in text:
        raise _Invalid(key, f"expected a path, got {_show(value)}")
    path = Path(text).expanduser()
    return path if path.is_absolute() else base / path


def _resources(value: Any, key: str) -> Mapping[str, float]:
    """A resources table: amounts >= 0, whole GPUs, and no name that only looks built in."""
    data = _table(value, key, None)
    lowered = {r.lower(): r for r in BUILTIN_RESOURCES}
    out: dict[str, float] = {}
    for name, amount in data.items():
        at = _join(key, name)
        _check_resource_name(name, at, lowered)
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) \
                or not math.isfinite(amount) or amount < 0:
            raise _Invalid(at, f"expected a number >= 0, got {_show(amount)}")
        if name == "GPU" and amount != int(amount):
            raise _Invalid(at, f"expected a whole number of GPUs (bundles may ask for "
                           f"fractions of one, a node has whole ones), got {amount}")
        out[name] = float(amount)
    return MappingProxyType(out)


def _check_resource_name(name: str, key: str, lowered: Mapping[str, str]) -> None:
    if name.startswith(NODE_RESOURCE):
        raise _Invalid(key, f"names starting with {NODE_RESOURCE!r} are taken: every node "
                       f"offers {NODE_RESOURCE}<its name> = 1")
    if name in BUILTIN_RESOURCES:
        return
    # Resource names are case-sensitive: a "gpus" would be a custom resource no bundle asks.
    near = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.75)
    if near:
        raise _Invalid(key, f"unknown resource {name!r}; did you mean {lowered[near[0]]!r}? "
                       "(names are case-sensitive; custom ones must not look like "
                       f"{', '.join(BUILTIN_RESOURCES)})")


def _labels(value: Any, key: str, resources: Mapping[str, float]) -> tuple[str, ...]:
    labels = _strings(value, key)
    lowered = {r.lower(): r for r in BUILTIN_RESOURCES}
    for i, label in enumerate(labels):
        _check_resource_name(label, f"{key}[{i}]", lowered)
        if label in BUILTIN_RESOURCES:
            raise _Invalid(f"{key}[{i}]", f"{label!r} is a built-in resource; set it under "
                           "resources instead")
        if label in resources:
            raise _Invalid(f"{key}[{i}]", f"{label!r} is also given under resources; keep one")
        if label in labels[:i]:
            raise _Invalid(f"{key}[{i}]", f"{label!r} is given twice")
    return labels
