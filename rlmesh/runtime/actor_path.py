"""Actor classes named by import path (``pkg.module:Class``), as a spawn sends them to the
process that runs them: the path of a class (with the script file of one defined in
``__main__``), and, in that process, the actor made from that path."""

from __future__ import annotations

import importlib
import os
import runpy
import sys
from typing import Any

from .actor import Actor


def import_path(cls: type | str) -> tuple[str, str]:
    """``("module:Qualname", main_script_path)`` for a class or its import path."""
    if isinstance(cls, str):
        if ":" not in cls:
            raise ValueError(f"actor class path {cls!r} must look like 'package.module:Class'")
        return cls, ""
    if not (isinstance(cls, type) and issubclass(cls, Actor)):
        raise TypeError(f"{cls!r} is not an Actor subclass")
    if "<locals>" in cls.__qualname__:
        raise ValueError(f"{cls.__qualname__} is defined inside a function; actor classes "
                         "must be importable by module path")
    main_path = ""
    if cls.__module__ in ("__main__", "__mp_main__"):
        main_path = os.path.abspath(getattr(sys.modules[cls.__module__], "__file__", "") or "")
        if not main_path:
            raise ValueError(f"{cls.__qualname__} lives in an interactive __main__; "
                             "define it in a module or a script file")
    return f"{cls.__module__}:{cls.__qualname__}", main_path


def instantiate(cls_path: str, main_path: str, args: Any, kwargs: Any) -> Actor:
    """Import ``module:Class`` (running the driver's script as __mp_main__ if needed)."""
    module_name, _, qualname = cls_path.partition(":")
    if module_name in ("__main__", "__mp_main__") and main_path:
        module = sys.modules.get("__mp_main__") or sys.modules.get("__main__")
        if module is None or getattr(module, "__file__", None) != main_path:
            globs = runpy.run_path(main_path, run_name="__mp_main__")
            module = type(sys)("__mp_main__")
            module.__dict__.update(globs)
            sys.modules["__mp_main__"] = module
    else:
        module = importlib.import_module(module_name)
    obj: Any = module
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if not (isinstance(obj, type) and issubclass(obj, Actor)):
        raise TypeError(f"{cls_path} is not an Actor subclass")
    return obj(*args, **kwargs)
