"""Code named by import path in plain data: finding the names in a config or a checkpoint,
and resolving a function that a message names, which never runs a file and never reaches a
package the process was not started with (the threat model: docs/security.md)."""

from __future__ import annotations

import importlib
import os
import re
import site
import sys
import sysconfig
from typing import Any, Collection, Iterator

# "pkg.module:qualname", or a file's "/dir/script.py:qualname".
_CODE = re.compile(r"^(?P<module>[A-Za-z_][\w.]*|[^:]*(/|\.py)[^:]*):[A-Za-z_][\w.]*$")
#: How a message names a function of the script the run was started from.
MAIN = "__mp_main__"


def code_names(data: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """``(where, value)`` for each string in ``data`` that names code: an import path or a
    file, and any ``env`` with a colon (gymnasium's "module:EnvId" imports the module)."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield from code_names(value, f"{where}.{key}" if where else str(key))
    elif isinstance(data, (list, tuple)):
        for i, value in enumerate(data):
            yield from code_names(value, f"{where}[{i}]")
    elif isinstance(data, str) and ":" in data and (
            _CODE.match(data) or where.rpartition(".")[2] == "env"):
        yield where, data


def is_file(module: str) -> bool:
    """Whether the module part of an import path is a file (``/dir/script.py``)."""
    return "/" in module or "\\" in module or module.endswith(".py")


def startup_code(config: dict[str, Any]) -> dict[str, Any]:
    """What the driver hands a process it starts, so that messages can later name functions
    of it: ``_code_roots``, the top-level packages of the code the config names and of the
    user's modules the driver has imported (not the standard library's or installed ones),
    and ``_main_script``, the script the driver runs (functions in it are sent as
    ``__mp_main__:name``)."""
    roots = {value.partition(":")[0].partition(".")[0] for _, value in code_names(config)
             if not is_file(value.partition(":")[0])}
    installed = tuple({*(sysconfig.get_path(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")),
                       site.getusersitepackages()})
    for name, module in list(sys.modules.items()):
        top = name.partition(".")[0]
        path = getattr(module, "__file__", None)
        if (path and top not in sys.stdlib_module_names and not top.startswith("_")
                and not os.path.abspath(path).startswith(installed)):
            roots.add(top)
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    script = os.path.abspath(main) if main and main.endswith(".py") else None
    return {"_code_roots": sorted(roots), "_main_script": script}


def resolve_sent(path: str, what: str, roots: Collection[str], main_script: str | None) -> Any:
    """The function ``path`` names in a message: ``pkg.module:name`` within the packages this
    process was started with (``roots``), or ``__mp_main__:name`` in the script the run was
    started from. A file path, or a package outside ``roots``, is refused: a message must not
    make a process run code of the sender's choosing."""
    module_name, sep, qualname = path.partition(":")
    if not sep or not module_name or not qualname:
        raise ValueError(f"{what} {path!r} must look like 'package.module:name'")
    if is_file(module_name):
        raise PermissionError(
            f"{what} {path!r} names a file; a message never makes a process run a file. Name "
            f"the function by module path, or a function of the run's script as '{MAIN}:name'")
    if module_name in ("__main__", MAIN):
        module = _main_module(what, path, main_script)
    elif module_name.partition(".")[0] in roots:
        module = importlib.import_module(module_name)
    else:
        raise PermissionError(
            f"{what} {path!r}: package {module_name.partition('.')[0]!r} is not one this "
            f"process was started with ({', '.join(sorted(roots)) or 'none'}); a message "
            "cannot bring in new code: import the module in the driver before building "
            "the algorithm, or name it in the config")
    obj: Any = module
    for part in qualname.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"{what} {path!r}: {module_name} has no attribute {qualname!r}")
        obj = getattr(obj, part)
    return obj


def _main_module(what: str, path: str, main_script: str | None) -> Any:
    """The run's script as ``__mp_main__``: the one the process runs already, or the one it
    was told at start-up (run now, once, as multiprocessing's spawn does)."""
    from rlmesh.envs import run_script

    if main_script is None:
        raise PermissionError(f"{what} {path!r}: this process was started from no script")
    for name in (MAIN, "__main__"):
        file = getattr(sys.modules.get(name), "__file__", None)
        if file and os.path.abspath(file) == main_script:
            return sys.modules[name]
    return run_script(main_script)
