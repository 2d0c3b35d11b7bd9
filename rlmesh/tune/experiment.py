"""One experiment as plain data (``TrainSpec``: the algorithm by name, its config, the stop
criteria, checkpoints) and the algorithm it builds: what ``rlmesh train``, a sweep's trial
workers and ``rlmesh launch``'s job share."""

from __future__ import annotations

import dataclasses
from typing import Any

from rlmesh.driver.algorithm_registry import UnknownAlgorithm, get_config_class

DEFAULT_STOP = {"training_iteration": 100}


class UsageError(Exception):
    """A problem with the command line or the -f file, printed as one line (exit 2)."""


@dataclasses.dataclass
class TrainSpec:
    """Everything one `rlmesh train` run needs, flags and file merged."""

    run: str
    env: Any
    config: dict
    stop: dict
    experiment: str | None = None
    local_dir: str | None = None
    checkpoint_freq: int = 0
    checkpoint_at_end: bool = False
    # Seconds a signalled run waits for its iteration to end before cutting it short.
    stop_grace_s: float = 30.0
    # Experiment trackers, {"wandb"|"mlflow": options} (rlmesh/tune/trackers.py).
    trackers: dict = dataclasses.field(default_factory=dict)


def deep_merge(base: dict, override: dict) -> dict:
    """``base`` updated by ``override``, dicts inside merged key by key."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def config_class(run: str):
    """The config class of ``run``: a registered name (case-insensitive) or an import path
    ``pkg.module:MyAlgorithm``; UsageError if neither."""
    try:
        return get_config_class(run)
    except UnknownAlgorithm as e:
        raise UsageError(str(e)) from None


def canonical_keys(cls, config: dict) -> dict:
    """``config`` with every known spelling (attribute name, alias) turned into its key, so a
    file's "num_workers" and a flag's "num_env_runners" meet; unknown keys stay for from_dict
    to reject with its "did you mean"."""
    spelling = {}
    for row in cls.fields_table():
        for s in (row.name, row.key, *row.aliases):
            spelling[s] = row.key
    return {spelling.get(k, k): v for k, v in config.items()}


def parse_stop(stop: dict, where: str) -> dict[str, float]:
    from rlmesh.results import flatten

    out = {}
    for key, value in flatten(stop).items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UsageError(f"{where}: stop threshold of {key!r} must be a number, got {value!r}")
        out[key] = value
    return out


def make_config(spec: TrainSpec):
    """The validated config object; raises ConfigError before any process starts."""
    config = config_class(spec.run).from_dict(spec.config)
    config.validate()
    return config


def used_config(algo, config):
    """The config ``algo`` runs with: its own, where defaults that depend on the env's
    observations are resolved (config.for_observations); ``config`` for a stand-in without one."""
    used = getattr(algo, "config", None)
    return used if hasattr(used, "to_dict") else config


def build_algorithm(config):
    """Start the algorithm (tests replace this to train without processes). Its env
    runners' interpreters start first, so that their imports overlap the driver's (torch)."""
    from rlmesh.driver.mesh import prestart_runners
    from rlmesh.config.learner_gpus import check_learner_gpus
    from rlmesh.runtime.process import discard_warm

    # Before the runners' interpreters start: a run that cannot get its GPUs starts nothing.
    check_learner_gpus(config.num_learners, config.num_gpus_per_learner, config.fake_gpus)
    prestart_runners(config)
    try:
        return config.build()
    finally:
        discard_warm()  # those the run did not take (none, if it failed to start)
