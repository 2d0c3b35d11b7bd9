"""Experiment files in RLlib's tuned-example shape (YAML, TOML or JSON), and rlmesh's own
tuned examples, shipped beside this module and found by bare name::

    rlmesh train -f cartpole-ppo.yaml        # ./cartpole-ppo.yaml, else the packaged one

A file holds one experiment, either flat, ``{"run": "PPO", "env": ..., "config": {...},
"stop": {...}}``, or as RLlib writes them, ``{experiment_name: {run, env, config, stop}}``.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

SUFFIXES = (".yaml", ".yml", ".toml", ".json")
# Keys of one experiment, as in RLlib's tuned examples (storage_path: Tune's newer local_dir;
# trackers, or Tune's callbacks by RLlib's class names: rlmesh/tune/trackers.py).
EXPERIMENT_KEYS = ("run", "env", "config", "stop", "checkpoint_freq", "checkpoint_at_end",
                   "local_dir", "storage_path", "num_samples", "trackers", "callbacks")


class ExperimentFileError(ValueError):
    """A file that cannot be found, parsed or read as one experiment; says which and why."""


def names() -> list[str]:
    """File names of the packaged tuned examples."""
    return sorted(p.name for p in resources.files(__name__).iterdir()
                  if p.name.endswith(SUFFIXES))


def find(name: str) -> Traversable | None:
    """The packaged tuned example ``name`` ('cartpole-ppo.yaml' or 'cartpole-ppo'), or None."""
    base = Path(name).name
    for candidate in (base, *(base + s for s in SUFFIXES)):
        path = resources.files(__name__).joinpath(candidate)
        if candidate.endswith(SUFFIXES) and path.is_file():
            return path
    return None


def _yaml_load(text: str) -> Any:
    import yaml

    class Loader(yaml.SafeLoader):
        """PyYAML reads YAML 1.1, where 3e-4 is a string; take YAML 1.2's floats too."""

    Loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(
        r"^[-+]?(?:[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?|[0-9][0-9_]*[eE][-+]?[0-9]+"
        r"|\.[0-9_]+(?:[eE][-+]?[0-9]+)?|\.(?:inf|Inf|INF))$|^\.(?:nan|NaN|NAN)$"),
        list("-+0123456789."))
    return yaml.load(text, Loader=Loader)  # noqa: S506 (a SafeLoader subclass)


def _toml_load(text: str) -> Any:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    return tomllib.loads(text)


_LOADERS = {".yaml": _yaml_load, ".yml": _yaml_load, ".toml": _toml_load, ".json": json.loads}


def read(name: str) -> tuple[Any, str]:
    """(parsed data, where it was found) of ``name``: a path, else a packaged example."""
    path = Path(os.path.expanduser(name))
    if path.is_file():
        text, where = path.read_text(encoding="utf-8"), str(path)
    elif (found := find(name)) is not None:
        text, where = found.read_text(encoding="utf-8"), f"rlmesh/tuned_examples/{found.name}"
    else:
        raise ExperimentFileError(f"no such file: {name} (rlmesh's tuned examples: "
                                  f"{', '.join(names())})")
    suffix = Path(where).suffix.lower()
    if suffix not in _LOADERS:
        raise ExperimentFileError(f"{where}: unknown file type {suffix!r} "
                                  "(use .yaml, .toml or .json)")
    try:
        return _LOADERS[suffix](text), where
    except Exception as e:  # each parser has its own error class; all mean the same here
        raise ExperimentFileError(f"{where}: cannot parse: {' '.join(str(e).split())}") from None


def load_experiment(name: str) -> tuple[str | None, dict, str]:
    """(experiment name or None for the flat shape, the experiment dict, where it was found)
    of a file holding one experiment."""
    experiments, where = load_experiments(name)
    if len(experiments) > 1:
        raise ExperimentFileError(f"{where} holds {len(experiments)} experiments "
                                  f"({', '.join(str(n) for n, _ in experiments)}); give it one")
    return experiments[0][0], experiments[0][1], where


def load_experiments(name: str) -> tuple[list[tuple[str | None, dict]], str]:
    """Every experiment of a file, [(name or None for the flat shape, dict)], and where it
    was found. Several are RLlib's ``{name1: {...}, name2: {...}}``, run one after another."""
    data, where = read(name)
    if not isinstance(data, dict) or not data:
        raise ExperimentFileError(f"{where}: expected a mapping with run, env, config and stop")
    if any(k in EXPERIMENT_KEYS for k in data):
        experiments = [(None, data)]
    else:  # RLlib's {experiment_name: {...}, ...}
        experiments = [(str(n), e) for n, e in data.items()]
    for exp_name, exp in experiments:
        if not isinstance(exp, dict):
            raise ExperimentFileError(f"{where}: experiment {exp_name!r} is not a mapping")
        for key in exp:
            if key not in EXPERIMENT_KEYS:
                close = difflib.get_close_matches(str(key), EXPERIMENT_KEYS, n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"expected {', '.join(EXPERIMENT_KEYS)}"
                raise ExperimentFileError(f"{where}: unknown key {key!r}; {hint}")
        if not isinstance(exp.get("config", {}), dict):
            raise ExperimentFileError(f"{where}: config must be a mapping")
    return experiments, where
