"""Search spaces in config values: ``grid_search``, ``choice``, ``uniform``, ``quniform``,
``loguniform``, ``randint``, ``sample_from``, written as Python objects or as one-key dicts
in a file (``{"lr": {"grid_search": [1e-3, 1e-4]}}``), and their expansion into trial configs."""

from __future__ import annotations

import copy
import importlib
import itertools
import math
import random
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable


class SpaceError(ValueError):
    """A search space written wrong; the message names the key and the expected form."""


@dataclass(frozen=True)
class Domain:
    """One searched value. ``kind`` is the key it is written with in a file."""

    kind: str
    args: tuple

    def sample(self, rng: random.Random, spec: Any = None) -> Any:
        a = self.args
        if self.kind == "choice":
            return copy.deepcopy(rng.choice(a[0]))
        if self.kind == "uniform":
            return rng.uniform(a[0], a[1])
        if self.kind == "quniform":
            return round(round(rng.uniform(a[0], a[1]) / a[2]) * a[2], 12)
        if self.kind == "loguniform":
            return math.exp(rng.uniform(math.log(a[0]), math.log(a[1])))
        if self.kind == "randint":
            return rng.randrange(a[0], a[1])
        if self.kind == "sample_from":
            return _function(a[0])(spec)
        raise SpaceError(f"a {self.kind} is expanded, not sampled")

    def suggest(self, trial: Any, name: str) -> Any:
        """The value an Optuna trial suggests for this domain (``sample_from`` excluded)."""
        a = self.args
        if self.kind == "choice":
            simple = all(v is None or isinstance(v, (bool, int, float, str)) for v in a[0])
            if simple:
                return trial.suggest_categorical(name, list(a[0]))
            return copy.deepcopy(a[0][trial.suggest_categorical(name, list(range(len(a[0]))))])
        if self.kind == "uniform":
            return trial.suggest_float(name, a[0], a[1])
        if self.kind == "quniform":
            return trial.suggest_float(name, a[0], a[1], step=a[2])
        if self.kind == "loguniform":
            return trial.suggest_float(name, a[0], a[1], log=True)
        if self.kind == "randint":
            return trial.suggest_int(name, a[0], a[1] - 1)
        raise SpaceError(f"a {self.kind} is not suggested by a searcher")

    def to_data(self) -> dict:
        return {self.kind: list(self.args) if len(self.args) > 1 else self.args[0]}


# --- the Python spellings (as ray.tune's) ---

def grid_search(values: list) -> Domain:
    return _domain("grid_search", values, "grid_search")


def choice(categories: list) -> Domain:
    return _domain("choice", categories, "choice")


def uniform(lower: float, upper: float) -> Domain:
    return _domain("uniform", [lower, upper], "uniform")


def quniform(lower: float, upper: float, q: float) -> Domain:
    return _domain("quniform", [lower, upper, q], "quniform")


def loguniform(lower: float, upper: float) -> Domain:
    return _domain("loguniform", [lower, upper], "loguniform")


def randint(lower: int, upper: int) -> Domain:
    return _domain("randint", [lower, upper], "randint")


def sample_from(func: Callable | str) -> Domain:
    """``func(spec)`` with ``spec.config`` the trial's config (other values resolved);
    in a file, ``func`` is an import path ``pkg.module:function``."""
    return _domain("sample_from", func, "sample_from")


KINDS = ("grid_search", "choice", "uniform", "quniform", "loguniform", "randint", "sample_from")
_ARITY = {"uniform": 2, "quniform": 3, "loguniform": 2, "randint": 2}


def _domain(kind: str, value: Any, where: str) -> Domain:
    if kind in ("grid_search", "choice"):
        if not isinstance(value, (list, tuple)) or not value:
            raise SpaceError(f"{where}: {kind} takes a non-empty list, got {value!r}")
        return Domain(kind, (list(value),))
    if kind == "sample_from":
        if not (callable(value) or (isinstance(value, str) and ":" in value)):
            raise SpaceError(f"{where}: sample_from takes a function or 'pkg.module:function', "
                             f"got {value!r}")
        return Domain(kind, (value,))
    n = _ARITY[kind]
    if (not isinstance(value, (list, tuple)) or len(value) != n
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)):
        raise SpaceError(f"{where}: {kind} takes {n} numbers, got {value!r}")
    if value[0] >= value[1] or (kind == "loguniform" and value[0] <= 0):
        raise SpaceError(f"{where}: {kind} needs lower < upper{' and lower > 0' if kind == 'loguniform' else ''}, "
                         f"got {value!r}")
    return Domain(kind, tuple(value))


def _function(ref: Callable | str) -> Callable:
    if callable(ref):
        return ref
    module, _, name = ref.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise SpaceError(f"sample_from: cannot import {ref!r} ({e})") from None


# --- finding and expanding spaces ---

def as_domain(value: Any, where: str) -> Domain | None:
    """The Domain ``value`` writes, if it is one (an object or a one-key dict)."""
    if isinstance(value, Domain):
        return value
    if isinstance(value, dict) and len(value) == 1:
        kind = next(iter(value))
        if kind in KINDS:
            return _domain(kind, value[kind], where)
    return None


def find_domains(config: Any, path: tuple = ()) -> dict[tuple, Domain]:
    """Every searched value of ``config``, by its path of keys."""
    found: dict[tuple, Domain] = {}
    if isinstance(config, dict):
        for key, value in config.items():
            where = (*path, key)
            domain = as_domain(value, "/".join(map(str, where)))
            if domain is not None:
                found[where] = domain
            else:
                found.update(find_domains(value, where))
    return found


def has_domains(config: Any) -> bool:
    return bool(find_domains(config))


def set_path(config: dict, path: tuple, value: Any) -> None:
    for key in path[:-1]:
        config = config[key]
    config[path[-1]] = value


def path_name(path: tuple) -> str:
    return "/".join(map(str, path))


def grid_variants(config: dict) -> list[tuple[dict, dict]]:
    """(config with its grid values set, {path name: grid value}) for each point of the grid,
    in order (the last grid key varies fastest)."""
    grids = {p: d for p, d in find_domains(config).items() if d.kind == "grid_search"}
    out = []
    for values in itertools.product(*(d.args[0] for d in grids.values())):
        variant = copy.deepcopy(_plain(config, grids))
        for path, value in zip(grids, values):
            set_path(variant, path, copy.deepcopy(value))
        out.append((variant, {path_name(p): v for p, v in zip(grids, values)}))
    return out


def _plain(config: dict, grids: dict) -> dict:
    """``config`` with the grid Domain objects out of it, so deepcopy never copies a lambda."""
    out = dict(config)
    for path in grids:
        node = out
        for key in path[:-1]:
            node[key] = dict(node[key])
            node = node[key]
        node[path[-1]] = None
    return out


def resolve(variant: dict, rng: random.Random, optuna_trial: Any = None) -> tuple[dict, dict]:
    """``variant`` with every remaining domain drawn (by ``optuna_trial`` when given, else
    ``rng``; ``sample_from`` last, seeing the rest); the config and {name: value} drawn."""
    config = variant
    drawn = {}
    domains = find_domains(config)
    later = {p: d for p, d in domains.items() if d.kind == "sample_from"}
    for path, domain in domains.items():
        if path in later:
            continue
        name = path_name(path)
        value = domain.suggest(optuna_trial, name) if optuna_trial is not None else domain.sample(rng)
        set_path(config, path, value)
        drawn[name] = value
    for path, domain in later.items():
        value = domain.sample(rng, SimpleNamespace(config=config))
        set_path(config, path, value)
        drawn[path_name(path)] = value
    return config, drawn
