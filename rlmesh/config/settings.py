"""The machinery behind AlgorithmConfig: ``setting()`` declares a hyperparameter once (its
default, builder group, doc, aliases, bounds), and these helpers read that metadata to check
types, suggest the closest key for a typo, and turn values into plain data."""

from __future__ import annotations

import copy
import dataclasses
import difflib
import operator
import types
from dataclasses import field
from typing import Any, Literal, NamedTuple, Union, get_args, get_origin

#: The builder methods, in RLlib's names; every setting belongs to exactly one.
GROUPS = (
    "environment", "env_runners", "training", "rl_module", "learners",
    "resources", "framework", "callbacks", "reporting", "debugging", "fault_tolerance",
    "evaluation", "multi_agent", "offline_data",
)


class ConfigError(ValueError):
    """A config key or value that rlmesh cannot use; the message says which and why."""


class Setting(NamedTuple):
    """One row of ``fields_table()``: what a CLI ``--help`` or a docs page shows."""

    name: str  # attribute name
    key: str  # name in dicts and builder kwargs ("lambda" for lambda_)
    group: str  # builder method that sets it
    type: str
    default: Any
    doc: str
    aliases: tuple[str, ...]


_BOUNDS = (("ge", ">=", operator.ge), ("gt", ">", operator.gt), ("le", "<=", operator.le))
_UNSET = object()  # a builder argument the caller did not pass (None is a real value)


def setting(default, group, *, doc, key=None, aliases=(), ge=None, gt=None, le=None,
            merge=False):
    """Declare one hyperparameter: its default, the builder ``group`` that sets it, what it
    does, old names still accepted (``aliases``), numeric bounds checked by validate(), and
    whether a dict given for it updates the current dict (``merge``) instead of replacing it."""
    if group not in GROUPS:
        raise ValueError(f"unknown group {group!r}; expected one of {GROUPS}")
    meta = {"group": group, "doc": doc, "key": key, "aliases": tuple(aliases),
            "ge": ge, "gt": gt, "le": le, "merge": merge}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return field(default=default, metadata=meta)



def _fields(cls) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls)}


def _names(cls) -> dict[str, str]:
    """Every accepted spelling (attribute name, key, alias) -> attribute name."""
    names = {}
    for f in dataclasses.fields(cls):
        for spelling in (f.name, f.metadata["key"], *f.metadata["aliases"]):
            if spelling:
                names[spelling] = f.name
    return names


def _unknown_key_message(key: str, names: dict[str, str], cls) -> str:
    fields = _fields(cls)
    # Only the matches nearly as close as the best: 'num_env_runner' should not also offer
    # 'num_gpus_per_env_runner', nor 'lamda' offer 'gamma'.
    scored = sorted(((difflib.SequenceMatcher(None, key.lower(), c).ratio(), c) for c in names),
                    reverse=True)
    close = [c for ratio, c in scored if ratio >= max(0.7, scored[0][0] - 0.1)]
    # Suggest each matching setting once, under its current key, not its old alias.
    keys = list(dict.fromkeys(fields[names[c]].metadata["key"] or names[c] for c in close))
    if not keys:
        return f"unknown config key {key!r} ({cls.__name__}.fields_table() lists the valid keys)"
    return f"unknown config key {key!r}; did you mean {' or '.join(map(repr, keys[:3]))}?"


def _matches(value, hint) -> bool:
    origin = get_origin(hint)
    if hint is Any:
        return True
    if origin is Literal:
        return any(value == a and type(value) is type(a) for a in get_args(hint))
    if origin in (Union, types.UnionType):
        return any(_matches(value, a) for a in get_args(hint))
    if hint is type(None):
        return value is None
    if hint in (int, float):  # bool is an int to Python, never to a user; 1 is a fine float
        accepted = (int,) if hint is int else (int, float)
        return isinstance(value, accepted) and not isinstance(value, bool)
    return isinstance(value, origin or hint)


def _describe(hint) -> str:
    origin = get_origin(hint)
    if origin is Literal:
        return " or ".join(map(repr, get_args(hint)))
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(a) for a in get_args(hint))
    if hint is type(None):
        return "None"
    return getattr(origin or hint, "__name__", str(hint))


def _jsonable(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "tolist") and hasattr(value, "dtype"):  # numpy arrays and scalars
        return value.tolist()
    if type(value).__module__.startswith("gymnasium.spaces"):  # a space: its data form
        from rlmesh.envs import space_to_data

        return _jsonable(space_to_data(value))
    if isinstance(value, type) or isinstance(value, types.FunctionType):
        if "<" in value.__qualname__:  # a lambda or a local: no path can import it
            raise TypeError(f"{value!r} cannot be imported by path; define it at module level")
        return f"{value.__module__}:{value.__qualname__}"
    raise TypeError(f"{value!r} is not plain data (JSON types, a class or a function)")
