"""The machinery behind AlgorithmConfig: ``setting()`` declares a hyperparameter once (its
default, builder group, doc, aliases, bounds); these helpers and the ``Settings`` base class
read that metadata to check values, suggest the closest key for a typo, and give plain data."""

from __future__ import annotations

import copy
import dataclasses
import difflib
import logging
import operator
import types
from dataclasses import field
from typing import Any, Literal, NamedTuple, Union, get_args, get_origin, get_type_hints

logger = logging.getLogger(__name__)

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
    value = getattr(value, "__rlmesh_class__", value)  # @rlmesh.remote's wrapper: its class
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "tolist") and hasattr(value, "dtype"):  # numpy arrays and scalars
        return value.tolist()
    if type(value).__module__.startswith("gymnasium.spaces"):  # a space: its data form
        from rlmesh.env.registry import space_to_data

        return _jsonable(space_to_data(value))
    if isinstance(value, type) or isinstance(value, types.FunctionType):
        from rlmesh.runtime import handed

        if handed.needs_handing(value):  # a lambda or a local: handed to local processes
            return handed.token_for(value)
        from rlmesh.runtime.import_path import path_of  # a __main__ script's by its file

        return path_of(value)
    raise TypeError(f"{value!r} is not plain data (JSON types, a class or a function)")


class Settings:
    """What a dataclass of ``setting()`` fields does with their metadata: the builders'
    group check, RLlib's dict access, from_dict, validate() and fields_table(), and a
    subclass's own defaults (``class PPOConfig(AlgorithmConfig, defaults={"lr": 5e-5})``).
    The base of AlgorithmConfig, which declares the fields."""

    def __init_subclass__(cls, defaults: dict | None = None, **kwargs):
        super().__init_subclass__(**kwargs)
        if not defaults:
            return
        # Re-declare each inherited field with the new default and the same metadata, so
        # the subclass's @dataclass __init__, fields() and fields_table() show its defaults
        # while the docs stay where they were written.
        # Every base's fields, mixed-in groups included (fields(cls) sees the first base's).
        inherited = {f.name: f for base in reversed(cls.__mro__[1:])
                     if dataclasses.is_dataclass(base) for f in dataclasses.fields(base)}
        hints = get_type_hints(cls)
        own = cls.__dict__.get("__annotations__")
        if own is None:
            own = {}
            cls.__annotations__ = own
        for name, value in defaults.items():
            if name not in inherited:
                raise TypeError(f"{cls.__name__} sets a default for unknown setting {name!r}")
            own[name] = hints[name]
            setattr(cls, name, setting(value, **inherited[name].metadata))

    # --- builders ---

    def _set(self, group: str, values: dict):
        fields = _fields(type(self))
        own, derived = self._translate({k: v for k, v in values.items() if v is not _UNSET})
        for key, value in own.items():
            name = self._resolve(key)
            owner = fields[name].metadata["group"]
            if owner != group:
                raise ConfigError(f"{key!r} is not a {group} setting; set it with "
                                  f".{owner}({fields[name].metadata['key'] or name}=...)")
            self._assign(name, value)
        for key, value in derived.items():  # made from RLlib's keys: its builders differ
            self._assign(self._resolve(key), value)
        return self

    def _assign(self, name: str, value) -> None:
        if _fields(type(self))[name].metadata["merge"] and isinstance(value, dict):
            merged = copy.deepcopy(getattr(self, name))
            merged.update(copy.deepcopy(value))
            value = merged
        setattr(self, name, value)

    # --- dicts ---

    def __getitem__(self, key: str) -> Any:
        """RLlib's dict-style read: ``config["lr"]``, ``config["lambda"]``."""
        return getattr(self, self._resolve(key))

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except ConfigError:
            return default

    def __contains__(self, key: str) -> bool:
        return key in _names(type(self))

    @classmethod
    def from_dict(cls, d: dict):
        """A config with the defaults of ``cls`` updated by ``d`` (keys, names or aliases)."""
        return cls().update_from_dict(d)

    def update_from_dict(self, d: dict):
        """Set each key of ``d`` whatever its group; an unknown key raises ConfigError."""
        own, derived = self._translate(d)
        for values in (own, derived):  # both may set one dict setting (merged in turn)
            for key, value in values.items():
                self._assign(self._resolve(key), value)
        return self

    @classmethod
    def _translate(cls, values: dict) -> tuple[dict, dict]:
        """``values`` split into keys of this class (resolved by name or alias) and keys made
        from another vocabulary's (AlgorithmConfig: RLlib's, rlmesh/config/rllib.py)."""
        return values, {}

    def copy(self):
        """A deep copy: changing its dicts (model, env_config) leaves this one alone."""
        return copy.deepcopy(self)

    @classmethod
    def _resolve(cls, key) -> str:
        names = _names(cls)
        name = names.get(key)
        if name is None:
            raise ConfigError(_unknown_key_message(str(key), names, cls))
        if key in _fields(cls)[name].metadata["aliases"]:
            logger.debug("config key %r is RLlib's old name for %r", key, name)
        return name

    # --- checks ---

    def validate(self) -> None:
        """Raise ConfigError listing every value that is of the wrong type, out of bounds,
        or inconsistent with another; build() calls it."""
        hints = get_type_hints(type(self))
        problems = [p for f in dataclasses.fields(self) if (p := self._check_field(f, hints))]
        if not problems:  # cross checks assume well-typed values
            problems = self._cross_checks()
        if problems:
            raise ConfigError("invalid config:\n  " + "\n  ".join(problems))

    def _check_field(self, f: dataclasses.Field, hints: dict) -> str | None:
        key, value, meta = f.metadata["key"] or f.name, getattr(self, f.name), f.metadata
        hint = hints[f.name]
        if not _matches(value, hint):
            return f"{key}: expected {_describe(hint)}, got {value!r}"
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            for bound, symbol, ok in _BOUNDS:
                if meta[bound] is not None and not ok(value, meta[bound]):
                    return f"{key}: expected {symbol} {meta[bound]}, got {value!r}"
        return None

    def _cross_checks(self) -> list[str]:
        """Checks that read several settings; a subclass extends the list."""
        return []

    @classmethod
    def fields_table(cls, group: str | None = None) -> list[Setting]:
        """Every setting of ``cls`` (or of one group) with its key, default and doc."""
        rows, hints = [], get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if group is None or f.metadata["group"] == group:
                default = f.default_factory() if f.default is dataclasses.MISSING else f.default
                rows.append(Setting(f.name, f.metadata["key"] or f.name, f.metadata["group"],
                                    _describe(hints[f.name]), default, f.metadata["doc"],
                                    f.metadata["aliases"]))
        return rows
