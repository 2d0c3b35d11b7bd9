"""The algorithms `rlmesh train --run NAME` knows, in one place, and how a name or an import
path (``pkg.module:MyAlgo`` or ``pkg.module:MyConfig``) becomes a config class."""

from __future__ import annotations

import difflib
from typing import Any

from rlmesh.runtime.import_path import import_object

#: Algorithm name -> the import path of its config class (the config's build() makes it).
ALGORITHMS = {
    "PPO": "rlmesh.algorithms.ppo_config:PPOConfig",
    "IMPALA": "rlmesh.algorithms.impala_config:ImpalaConfig",
    "APPO": "rlmesh.algorithms.appo_config:APPOConfig",
    "PG": "rlmesh.algorithms.pg_config:PGConfig",
    "A2C": "rlmesh.algorithms.a2c_config:A2CConfig",
    "A3C": "rlmesh.algorithms.a3c_config:A3CConfig",
    "DQN": "rlmesh.algorithms.dqn_config:DQNConfig",
    "SimpleQ": "rlmesh.algorithms.simple_q_config:SimpleQConfig",
    "DDPG": "rlmesh.algorithms.ddpg_config:DDPGConfig",
    "TD3": "rlmesh.algorithms.td3_config:TD3Config",
    "SAC": "rlmesh.algorithms.sac_config:SACConfig",
    "APEX": "rlmesh.algorithms.apex_config:ApexDQNConfig",
    "APEX_DDPG": "rlmesh.algorithms.apex_config:ApexDDPGConfig",
    "MARWIL": "rlmesh.algorithms.marwil_config:MARWILConfig",
    "BC": "rlmesh.algorithms.bc_config:BCConfig",
    "CQL": "rlmesh.algorithms.cql_config:CQLConfig",
    "IQL": "rlmesh.algorithms.iql_config:IQLConfig",
    "ES": "rlmesh.algorithms.es_config:ESConfig",
    "ARS": "rlmesh.algorithms.ars_config:ARSConfig",
}


class UnknownAlgorithm(ValueError):
    """``--run`` named nothing rlmesh can build."""


def get_config_class(run: str) -> type:
    """The config class of ``run``: a registered name (case-insensitive), or the import path
    of an Algorithm subclass (its ``config_class``) or of an AlgorithmConfig subclass."""
    from rlmesh.config.base import AlgorithmConfig

    if ":" in run:
        try:
            obj: Any = import_object(run, "--run")
        except (ValueError, ImportError) as e:
            raise UnknownAlgorithm(str(e)) from None
        if isinstance(obj, type) and issubclass(obj, AlgorithmConfig):
            return obj
        config_class = getattr(obj, "config_class", None)
        if isinstance(config_class, type) and issubclass(config_class, AlgorithmConfig):
            return _bound(config_class, obj)
        raise UnknownAlgorithm(f"--run {run!r} is {obj!r}, neither an Algorithm (with a "
                               "config_class) nor an AlgorithmConfig subclass")
    names = {n.lower(): n for n in ALGORITHMS}
    if run.lower() not in names:
        close = difflib.get_close_matches(run.upper(), list(ALGORITHMS), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise UnknownAlgorithm(f"unknown algorithm {run!r}; {hint}known: {', '.join(ALGORITHMS)}, "
                               "or an import path 'pkg.module:MyAlgorithm'")
    return import_object(ALGORITHMS[names[run.lower()]])


def registered_name(algo_class: type) -> str | None:
    """The registry's name of ``algo_class``, or None if it has none (checkpoints name an
    algorithm by it, so that loading one imports nothing a checkpoint chose)."""
    from rlmesh.policy.policy import class_path

    config_class = getattr(algo_class, "config_class", None)
    if config_class is None or "<" in algo_class.__qualname__:
        return None
    path, config_path = class_path(algo_class), class_path(config_class)
    for name, registered in ALGORITHMS.items():
        if registered == config_path and getattr(config_class, "algorithm_path", None) == path:
            return name
    return None


def get_algorithm_class(run: str) -> type:
    """The Algorithm class ``run`` builds."""
    return import_object(get_config_class(run).algorithm_path, "algorithm")


def _bound(config_class: type, algo_class: type) -> type:
    """``config_class`` made to build ``algo_class`` (a user's Algorithm that reuses another
    algorithm's config, as ``build_algorithm`` makes them)."""
    from rlmesh.policy.policy import class_path

    path = class_path(algo_class)
    if getattr(config_class, "algorithm_path", None) == path:
        return config_class
    return type(config_class.__name__, (config_class,), {"algorithm_path": path,
                                                         "__module__": config_class.__module__})
