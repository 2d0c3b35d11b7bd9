"""Code named by import path (``"pkg.module:qualname"``, ``"/dir/script.py:qualname"``): the
path of a function or class, the object a path names, an actor class sent to the process
that runs it, the names in a config or a checkpoint, and the function a message names,
which never runs a file and never reaches a package the process was not started with (the
threat model: docs/security.md). Every import path of rlmesh goes through here."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import re
import sys
from typing import TYPE_CHECKING, Any, Collection, Iterator

from .code_roots import user_roots
from .handed import is_token, needs_handing, resolve, token_for

if TYPE_CHECKING:
    from .actor import Actor

# "pkg.module:qualname", or a file's "/dir/script.py:qualname".
_CODE = re.compile(r"^(?P<module>[A-Za-z_][\w.]*|[^:]*(/|\.py)[^:]*):[A-Za-z_][\w.]*$")
#: How a message names a function of the script the run was started from.
MAIN = "__mp_main__"


def path_of(obj: Any, what: str = "object") -> str:
    """``"module:qualname"`` of a module-level function or class; what no other process
    could import (a lambda, a nested function, one from an interactive session) gets a
    token instead, which this machine's child processes are handed (runtime/handed.py).

    A function in the script run as ``__main__`` is named by the script's file
    (``/abs/script.py:make_env``); other processes run the script as ``__mp_main__``
    (its ``if __name__ == "__main__":`` block does not run), as multiprocessing does.
    """
    qualname = getattr(obj, "__qualname__", None)
    module = getattr(obj, "__module__", None)
    if not callable(obj) or not qualname or not module:
        raise TypeError(f"{what} must be a module-level function or class, got {obj!r}")
    if needs_handing(obj):  # <lambda>, <locals>, an interactive session's
        return token_for(obj)
    if module in ("__main__", MAIN):
        main_file = getattr(sys.modules.get(module), "__file__", None)
        if not main_file:
            raise ValueError(f"{what} {qualname}: its module {module} is not loaded here")
        return f"{os.path.abspath(main_file)}:{qualname}"
    return f"{module}:{qualname}"


def import_object(path: str, what: str = "object") -> Any:
    """The object named by ``"package.module:qualname"`` (or ``"/abs/script.py:qualname"``,
    or a token of runtime/handed.py)."""
    if is_token(path):
        return resolve(path, what)
    module_name, sep, qualname = path.partition(":")
    if not sep or not module_name or not qualname:
        raise ValueError(f"{what} {path!r} must look like 'package.module:name'")
    return _attribute(import_module(module_name, what, path), module_name, qualname, what, path)


def import_module(name: str, what: str, path: str) -> Any:
    """The module ``name`` of the import path ``path``: a script file runs as __mp_main__."""
    if name.endswith(".py"):
        return run_script(name)
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise ValueError(f"{what} {path!r}: cannot import module {name!r}: {exc}") from exc


def _attribute(module: Any, module_name: str, qualname: str, what: str, path: str) -> Any:
    obj: Any = module
    for part in qualname.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"{what} {path!r}: {module_name} has no attribute {qualname!r}")
        obj = getattr(obj, part)
    return obj


class ScriptImportStop(BaseException):
    """Raised by a run started at the top level of the driver's script while another
    process imports that script for its classes and functions (``stop_if_importing_script``):
    the import ends there, keeping the names defined above that line. A BaseException, so
    the user's ``except Exception`` does not swallow it."""


#: The script being imported as __mp_main__ in this process, while it runs.
_importing_script: str | None = None


def stop_if_importing_script(what: str) -> None:
    """Stop the import of the driver's script at ``what`` (a run it starts at top level).

    RLlib's docs write scripts without an ``if __name__ == "__main__":`` guard (Ray sends
    __main__'s classes by value); rlmesh's processes import the script for them, as
    multiprocessing's spawn does, and would start the run again in every runner. Everything
    the script defines above its first run is there; what it defines below is not."""
    if _importing_script is not None:
        raise ScriptImportStop(f"{what} at the top level of {_importing_script}")


def run_script(file: str) -> Any:
    """The script ``file`` as the module ``__mp_main__`` (run once, its ``if __name__ ==
    "__main__":`` block skipped), as multiprocessing's spawn finds the parent's script; a
    run the script starts at its top level ends the import there (ScriptImportStop)."""
    global _importing_script
    main = sys.modules.get(MAIN)
    if main is None or getattr(main, "__file__", None) != file:
        main = type(sys)(MAIN)
        main.__dict__.update(__file__=file, __name__=MAIN, __package__=None, __spec__=None,
                             __builtins__=__builtins__)
        sys.modules[MAIN] = main
        with open(file, "rb") as source:
            code = compile(source.read(), file, "exec")
        _importing_script = file
        try:
            exec(code, main.__dict__)
        except ScriptImportStop as stop:
            print(f"rlmesh: imported {os.path.basename(file)} for its definitions up to the "
                  f"run it starts ({stop}); the run is not repeated in this process",
                  file=sys.stderr)
        except BaseException:
            sys.modules.pop(MAIN, None)
            raise
        finally:
            _importing_script = None
    return main


# --- actor classes, as a spawn names them ---

def actor_path(cls: type | str) -> tuple[str, str]:
    """``("module:Qualname", main_script_path)`` for an Actor subclass or its import path."""
    from .actor import Actor  # here: importing it loads zmq, which envs and configs need not

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
    if cls.__module__ in ("__main__", MAIN):
        main_path = os.path.abspath(getattr(sys.modules[cls.__module__], "__file__", "") or "")
        if not main_path:
            raise ValueError(f"{cls.__qualname__} lives in an interactive __main__; "
                             "define it in a module or a script file")
    return f"{cls.__module__}:{cls.__qualname__}", main_path


def instantiate(cls_path: str, main_path: str, kwargs: dict[str, Any]) -> "Actor":
    """The actor ``actor_path`` named, made here (running the driver's script as
    __mp_main__ if its class lives there) from its constructor arguments by name, checked
    against the class's constructor first (a wrong name is refused naming the ones it takes)."""
    from .actor import Actor, table_of

    module_name, _, qualname = cls_path.partition(":")
    if module_name in ("__main__", MAIN) and main_path:
        module = script_module("actor class", cls_path, main_path)
    else:
        module = importlib.import_module(module_name)
    cls = _attribute(module, module_name, qualname, "actor class", cls_path)
    if not (isinstance(cls, type) and issubclass(cls, Actor)):
        raise TypeError(f"{cls_path} is not an Actor subclass")
    table_of(cls).check_constructor(kwargs)
    return cls(**kwargs)


# --- names in plain data, and functions named by messages ---

#: rlmesh functions that import a module named by a plain string of their arguments (not an
#: import path): the function's path -> (the config key of its arguments, the key that
#: names the module, the library whose own modules that key names first). The trust check
#: must see those strings too: ``{"env": "rlmesh.env.pettingzoo:make", "env_config":
#: {"name": "evilpkg"}}`` imports ``evilpkg``.
MODULE_ARGUMENTS = {"rlmesh.env.pettingzoo:make": ("env_config", "name", "pettingzoo")}


def code_names(data: Any, where: str = "", env: Any = None) -> Iterator[tuple[str, str]]:
    """``(where, value)`` for each string in ``data`` that names code: an import path or a
    file, any ``env`` with a colon (gymnasium's "module:EnvId" imports the module), and a
    module an env factory imports by name (``MODULE_ARGUMENTS``; the value is the module)."""
    if isinstance(data, dict):
        env = data.get("env", env)
        for key, value in data.items():
            yield from code_names(value, f"{where}.{key}" if where else str(key), env)
        yield from _named_modules(data, where, env)
    elif isinstance(data, (list, tuple)):
        for i, value in enumerate(data):
            yield from code_names(value, f"{where}[{i}]", env)
    elif isinstance(data, str) and ":" in data and (
            _CODE.match(data) or where.rpartition(".")[2] == "env"):
        yield where, data


def _named_modules(data: dict[str, Any], where: str, env: Any) -> Iterator[tuple[str, str]]:
    """The user's module that ``env`` (an entry of MODULE_ARGUMENTS) would import, named in
    ``data``'s arguments of it."""
    entry = MODULE_ARGUMENTS.get(env) if isinstance(env, str) else None
    if entry is None or not isinstance(data.get(entry[0]), dict):
        return
    arguments, key, library = entry
    name = data[arguments].get(key)
    if isinstance(name, str) and user_module(library, name) is not None:
        yield f"{where}.{arguments}.{key}" if where else f"{arguments}.{key}", name


def user_module(library: str, name: str) -> str | None:
    """The module of the user's that a name of ``library``'s envs means, or None where the
    name is the library's own: a registered id (``"classic/rps-v2"``), ``"library.x"``, or a
    module the installed library ships (``"classic.rps_v2"`` for ``library.classic.rps_v2``:
    found on disk, nothing imported). The library's own win: a package of the user's (or
    anyone's) named ``classic`` never stands in for it."""
    if "/" in name or name.startswith(f"{library}.") or not name:
        return None
    spec = importlib.util.find_spec(library) if library not in sys.modules else \
        getattr(sys.modules[library], "__spec__", None)
    top = name.partition(".")[0]
    for folder in (spec.submodule_search_locations or ()) if spec is not None else ():
        if os.path.isdir(os.path.join(folder, top)) or os.path.isfile(os.path.join(folder, f"{top}.py")):
            return None
    return name


def is_file(module: str) -> bool:
    """Whether the module part of an import path is a file (``/dir/script.py``)."""
    return "/" in module or "\\" in module or module.endswith(".py")


def startup_code(config: dict[str, Any]) -> dict[str, Any]:
    """What the driver hands a process it starts, so that messages can later name functions
    of it: ``_code_roots``, the top-level packages of the code the config names and of the
    user's modules the driver has imported (not the standard library's or installed ones),
    and ``_main_script``, the script the driver runs (functions in it are sent as
    ``__mp_main__:name``)."""
    roots = named_roots(config) | user_roots()
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    script = os.path.abspath(main) if main and main.endswith(".py") else None
    return {"_code_roots": sorted(roots), "_main_script": script}


def named_roots(data: Any) -> set[str]:
    """The top-level packages of the code ``data`` names by module (files left out)."""
    return {value.partition(":")[0].partition(".")[0] for _, value in code_names(data)
            if not is_file(value.partition(":")[0])}


# --- code named by a message: the trust rule ---

class SentCode:
    """What code a message may name in this process (docs/security.md, "Messages"): a
    module of a package the process was started with (``roots``: what its start-up config
    names, and the user's modules the driver had imported), or the run's script
    (``main_script``, as ``__mp_main__`` or by its file); public at every dotted step.
    Functions a message asks to run (``foreach_env``) are never rlmesh's own: its
    internals are not served that way. Classes a policy spec names may be rlmesh's (a
    policy spec of the default policy names ``rlmesh.policy.torch_policy:TorchPolicy``).
    Everything is checked before anything is imported."""

    def __init__(self, roots: Collection[str], main_script: str | None) -> None:
        self.roots = frozenset(roots)
        self.main_script = main_script

    def check(self, path: str, what: str, *, rlmesh: bool = False) -> None:
        """PermissionError (or ValueError for a malformed path) unless a message may name
        ``path``; imports nothing."""
        if not isinstance(path, str):
            raise ValueError(f"{what} must be an import path 'package.module:name', got "
                             f"{type(path).__name__}")
        if is_token(path):
            return  # a lambda this process was handed at start (handed.py), or nothing
        module_name, sep, qualname = path.partition(":")
        if not sep or not module_name or not qualname:
            raise ValueError(f"{what} {path!r} must look like 'package.module:name'")
        self._public(qualname.split("."), what, path)
        if module_name in (MAIN, "__main__"):
            return
        if is_file(module_name):
            if self._is_script(module_name):
                return
            raise PermissionError(
                f"{what} {path!r} names a file; a message never makes a process run a file. "
                f"Name the function by module path, or a function of the run's script as "
                f"'{MAIN}:name'")
        self.check_module(module_name, what, path, rlmesh=rlmesh)

    def check_module(self, module_name: str, what: str, path: str = "", *,
                     rlmesh: bool = False) -> None:
        """PermissionError unless a message may make this process import ``module_name``."""
        path = path or module_name
        self._public(module_name.split("."), what, path)
        top = module_name.partition(".")[0]
        if top == "rlmesh":
            if rlmesh:
                return
            raise PermissionError(f"{what} {path!r}: rlmesh's own functions are not run by "
                                  "message; name a function of your own")
        if top not in self.roots:
            raise PermissionError(
                f"{what} {path!r}: package {top!r} is not one this process was started with "
                f"({', '.join(sorted(self.roots - {'rlmesh'})) or 'none'}); a message cannot "
                "bring in new code: import the module in the driver before building the "
                "algorithm, or name it in the config")

    @staticmethod
    def _public(steps: list[str], what: str, path: str) -> None:
        for step in steps:
            if not step.isidentifier() or step.startswith("_"):
                raise PermissionError(f"{what} {path!r}: {step!r} is not a public name; a "
                                      "message may name public functions and classes only")

    def check_data(self, data: Any, what: str) -> None:
        """``check`` for every name of code in plain data (a policy spec, settings)."""
        for where, value in code_names(data):
            if ":" in value:
                self.check(value, f"{what} {where}", rlmesh=True)
            else:  # a module an env factory imports by name (MODULE_ARGUMENTS)
                self.check_module(value, f"{what} {where}")

    def resolve(self, path: str, what: str) -> Any:
        """The function ``path`` names, once ``check`` passed: a plain function defined in
        the module the path names (not one it imported from elsewhere: ``pkg.mod:os.system``
        is refused)."""
        self.check(path, what)
        if is_token(path):
            return resolve(path, what)
        module_name, _, qualname = path.partition(":")
        if module_name in (MAIN, "__main__") or is_file(module_name):
            module = script_module(what, path, self.main_script)
        else:
            module = importlib.import_module(module_name)
        fn = _attribute(module, module_name, qualname, what, path)
        if not inspect.isfunction(fn) or fn.__module__ != module.__name__:
            raise PermissionError(f"{what} {path!r} is not a function defined in "
                                  f"{module_name}; a message may name such functions only")
        return fn

    def _is_script(self, file: str) -> bool:
        return self.main_script is not None and os.path.abspath(file) == self.main_script


def resolve_sent(path: str, what: str, roots: Collection[str], main_script: str | None) -> Any:
    """The function ``path`` names in a message (``SentCode.resolve``)."""
    return SentCode(roots, main_script).resolve(path, what)


def script_module(what: str, path: str, main_script: str | None) -> Any:
    """The run's script as ``__mp_main__``: the one the process runs already, or the one it
    was told at start-up (run now, once, as multiprocessing's spawn does)."""
    if main_script is None:
        raise PermissionError(f"{what} {path!r}: this process was started from no script")
    for name in (MAIN, "__main__"):
        file = getattr(sys.modules.get(name), "__file__", None)
        if file and os.path.abspath(file) == main_script:
            return sys.modules[name]
    return run_script(main_script)
