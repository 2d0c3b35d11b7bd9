"""The table behind rlmesh.agents: which of today's algorithms (registry names) each
Trainer-era module names, under which Trainer and DEFAULT_CONFIG names, and ``exports()``,
which gives such a module its lazy attributes and its docstring."""

from __future__ import annotations

import copy
import sys
from typing import Any, Callable

# Module (below rlmesh.agents) -> the registry names it exports; the first is the one its
# DEFAULT_CONFIG belongs to, the others' are <NAME>_DEFAULT_CONFIG, as RLlib's were.
MODULES: dict[str, tuple[str, ...]] = {
    "ppo": ("PPO", "APPO"), "ppo.ppo": ("PPO",), "ppo.appo": ("APPO",),
    "pg": ("PG",), "pg.pg": ("PG",),
    "a3c": ("A3C", "A2C"), "a3c.a3c": ("A3C",), "a3c.a2c": ("A2C",),
    "impala": ("IMPALA",), "impala.impala": ("IMPALA",),
    "dqn": ("DQN", "SimpleQ", "APEX"), "dqn.dqn": ("DQN",), "dqn.simple_q": ("SimpleQ",),
    "dqn.apex": ("APEX",),
    "ddpg": ("DDPG", "TD3", "APEX_DDPG"), "ddpg.ddpg": ("DDPG",), "ddpg.td3": ("TD3",),
    "ddpg.apex": ("APEX_DDPG",),
    "sac": ("SAC",), "sac.sac": ("SAC",),
    "marwil": ("MARWIL", "BC"), "marwil.marwil": ("MARWIL",), "marwil.bc": ("BC",),
    "es": ("ES",), "es.es": ("ES",),
    "ars": ("ARS",), "ars.ars": ("ARS",),
    "cql": ("CQL",), "cql.cql": ("CQL",),
    "iql": ("IQL",), "iql.iql": ("IQL",),
}

# Other names a Trainer-era module held, by import path (RLlib's ppo.py defined the execution
# plan's PPO operators).
EXTRAS: dict[str, dict[str, str]] = {
    "ppo.ppo": {"UpdateKL": "rlmesh.execution.metric_ops:UpdateKL",
                "warn_about_bad_reward_scales": "rlmesh.execution.metric_ops:warn_about_bad_reward_scales"},
}

# Registry name -> RLlib's Trainer class name.
TRAINERS: dict[str, str] = {
    "PPO": "PPOTrainer", "APPO": "APPOTrainer", "PG": "PGTrainer", "A2C": "A2CTrainer",
    "A3C": "A3CTrainer", "IMPALA": "ImpalaTrainer", "DQN": "DQNTrainer",
    "SimpleQ": "SimpleQTrainer", "APEX": "ApexTrainer", "DDPG": "DDPGTrainer",
    "TD3": "TD3Trainer", "APEX_DDPG": "ApexDDPGTrainer", "SAC": "SACTrainer",
    "MARWIL": "MARWILTrainer", "BC": "BCTrainer", "ES": "ESTrainer", "ARS": "ARSTrainer",
    "CQL": "CQLTrainer", "IQL": "IQLTrainer",
}

_CONFIG_PREFIX = {"SimpleQ": "SIMPLE_Q"}  # else the registry name in capitals

# Where DEFAULT_CONFIG keeps rlmesh's value over the one RLlib's Trainer gave: said in the
# module's docstring.
_GPU_NOTE = ("its num_gpus is 0, where RLlib's asked for 1 GPU: the copy a script edits then "
             "trains on any machine; set num_gpus 1 on a GPU machine (on one without CUDA it "
             "refuses in one line, as RLlib did, unless _fake_gpus is set)")
NOTES = {"IMPALA": _GPU_NOTE, "APEX": _GPU_NOTE}
_DEFAULTS: dict[str, dict] = {}  # one DEFAULT_CONFIG per algorithm and process, as RLlib's


def default_config(run: str) -> dict[str, Any]:
    """The algorithm's whole default config as a plain dict: RLlib's classic-stack defaults
    where rlmesh's differ (``rllib_defaults("old")``), every key in its Trainer-era name
    where it had one. It loads back as it is (``XTrainer(config=DEFAULT_CONFIG.copy())``)."""
    if run not in _DEFAULTS:
        from rlmesh.config.rllib_keys import TRAINER_ERA_NAMES
        from rlmesh.driver.algorithm_registry import get_config_class

        data = get_config_class(run).rllib_defaults("old").to_dict()
        _DEFAULTS[run] = {TRAINER_ERA_NAMES.get(k, k): v for k, v in data.items()}
    return _DEFAULTS[run]


def deep_merged(base: dict, extra: dict) -> dict:
    """A copy of ``base`` updated by ``extra``, nested dicts key by key (RLlib's merge of
    an algorithm's config into the common one)."""
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _names(runs: tuple[str, ...]) -> dict[str, tuple[str, str]]:
    names = {}
    for i, run in enumerate(runs):
        names[TRAINERS[run]] = ("trainer", run)
        prefix = _CONFIG_PREFIX.get(run, run.upper())
        names["DEFAULT_CONFIG" if i == 0 else f"{prefix}_DEFAULT_CONFIG"] = ("config", run)
    return names


def _doc(module: str, runs: tuple[str, ...]) -> str:
    from rlmesh.driver.algorithm_registry import get_config_class

    lines = [f"RLlib's ray.rllib.agents.{module}, on today's classes (made by "
             "rlmesh.agents._exports from its table):", ""]
    for run in runs:
        config_cls = get_config_class(run)
        lines.append(f"- {TRAINERS[run]}(config=None, env=None) is {config_cls.algorithm_path} "
                     f"itself; today's spelling: {config_cls.__name__}().environment(env)"
                     f".build().")
    lines.append("- DEFAULT_CONFIG: a plain dict of the defaults, in the Trainer era's key names.")
    lines += [f"- {TRAINERS[run]}'s config: {NOTES[run]}." for run in runs if run in NOTES]
    return "\n".join(lines)


def exports(module: str) -> tuple[str, Callable[[str], Any], list[str]]:
    """The docstring, ``__getattr__`` and ``__all__`` of the Trainer-era module ``module``
    (its ``__name__``): Trainer classes and default configs load when first read."""
    rel = module.removeprefix("rlmesh.agents.")
    runs = MODULES[rel]
    names = _names(runs)
    names.update({name: ("path", path) for name, path in EXTRAS.get(rel, {}).items()})

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {module!r} has no attribute {name!r} (it has "
                                 f"{', '.join(sorted(names))})")
        kind, run = names[name]
        if kind == "path":
            from rlmesh.runtime.import_path import import_object

            value: Any = import_object(run, name)
        elif kind == "config":
            value = default_config(run)
        else:
            from rlmesh.driver.algorithm_registry import get_algorithm_class

            value = get_algorithm_class(run)
        setattr(sys.modules[module], name, value)  # read once, then a plain attribute
        return value

    return _doc(rel, runs), __getattr__, sorted(names)


def tf_policy_module(module: str, torch_names: dict[str, str]) -> Callable[[str], Any]:
    """A ``__getattr__`` for a Trainer-era TensorFlow policy module (``ppo_tf_policy``): each
    name is refused in one line naming its torch class (``{TF name: torch import path}``)."""
    def refuse(name: str) -> Any:
        if name not in torch_names:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        raise ImportError(f"{name}: rlmesh has no TensorFlow; use {torch_names[name]} (the same "
                          "policy in torch)")

    return refuse
