"""The classes a checkpoint names are of the kind their field needs (its algorithm an
Algorithm, its policies' classes Policies, its callbacks Callbacks), checked when it is read,
after the trust check: an edited checkpoint naming another kind ended in a traceback."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Iterator

from rlmesh.driver.checkpoints import CheckpointError


#: What each way of loading a checkpoint builds from the classes it names.
EVERY = ("algorithm", "policies", "callbacks")


def check_kinds(path: Path, meta: dict[str, Any], fields: tuple[str, ...] = EVERY) -> None:
    """CheckpointError in one line unless every class of ``fields`` that ``meta``
    (``checkpoints.read``'s, trust-checked) names imports and is a subclass of what its
    field needs. Only the fields the loader builds: a class it never uses is no error."""
    from rlmesh.runtime.import_path import import_object

    for where, value, kind in _named_classes(meta, fields):
        try:
            obj = _algorithm(value) if where == "algorithm" else import_object(value, where)
        except (ValueError, ImportError, AttributeError) as exc:
            raise CheckpointError(f"{path}: its {where} {value!r} cannot be loaded here "
                        f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
                        ) from None
        if not _extends(obj, kind):
            raise CheckpointError(f"{path}: its {where} {value!r} is {_kind_of(obj)}, not a subclass of "
                        f"{kind[0]}.{kind[1]}; load a checkpoint the run saved (this one was "
                        "edited or written by other code)")


#: rlmesh's Algorithm, by name: driver/algorithm.py imports this module's caller.
ALGORITHM = ("rlmesh.driver.algorithm", "Algorithm")


def _extends(obj: Any, kind: tuple[str, str]) -> bool:
    return isinstance(obj, type) and any((c.__module__, c.__qualname__) == kind
                                         for c in obj.__mro__)


def _named_classes(meta: dict[str, Any], fields: tuple[str, ...]
                   ) -> Iterator[tuple[str, str, tuple[str, str]]]:
    """``(field, import path or registry name, (module, name) of the class it must extend)``."""
    from rlmesh.callbacks import Callbacks
    from rlmesh.policy.policy import Policy

    if "algorithm" in fields and isinstance(meta.get("algorithm"), str):
        yield "algorithm", meta["algorithm"], ALGORITHM
    policies = meta.get("policies") if "policies" in fields else None
    for pid, spec in (policies.items() if isinstance(policies, dict) else ()):
        for key in ("policy_class", "runner_class"):
            if isinstance(spec, dict) and isinstance(spec.get(key), str):
                yield f"policy {pid!r} {key}", spec[key], _name(Policy)
    config = meta.get("config") if "callbacks" in fields else None
    callbacks = config.get("callbacks_class") if isinstance(config, dict) else None
    if isinstance(callbacks, str):
        yield "callbacks_class", callbacks, _name(Callbacks)


def _name(cls: type) -> tuple[str, str]:
    return cls.__module__, cls.__qualname__


def _algorithm(name: str) -> Any:
    from rlmesh.driver.algorithm_registry import ALGORITHMS, get_algorithm_class
    from rlmesh.runtime.import_path import import_object

    return get_algorithm_class(name) if name in ALGORITHMS else import_object(name, "algorithm")


def _kind_of(obj: Any) -> str:
    if isinstance(obj, type):
        return f"the class {obj.__module__}.{obj.__qualname__}"
    if inspect.isfunction(obj) or inspect.isbuiltin(obj):
        return "a function"
    if inspect.ismodule(obj):
        return "a module"
    return f"a {type(obj).__name__}"
