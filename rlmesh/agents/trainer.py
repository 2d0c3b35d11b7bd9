"""RLlib's ray.rllib.agents.trainer: ``Trainer`` is today's ``rlmesh.driver.algorithm.Algorithm``
(it takes RLlib's ``Trainer(config=..., env=...)``), ``COMMON_CONFIG`` the defaults every
algorithm shares in the Trainer era's key names, ``with_common_config`` RLlib's merge."""

from __future__ import annotations

from typing import Any

from rlmesh.agents._exports import deep_merged

__all__ = ["Trainer", "COMMON_CONFIG", "with_common_config"]

_common: dict[str, Any] = {}


def _common_config() -> dict[str, Any]:
    if not _common:
        from rlmesh.config.base import AlgorithmConfig
        from rlmesh.config.rllib_keys import TRAINER_ERA_NAMES

        data = AlgorithmConfig.rllib_defaults("old").to_dict()
        _common.update({TRAINER_ERA_NAMES.get(k, k): v for k, v in data.items()})
    return _common


def with_common_config(extra_config: dict[str, Any]) -> dict[str, Any]:
    """A new dict: COMMON_CONFIG updated by ``extra_config`` (nested dicts key by key), as an
    algorithm's DEFAULT_CONFIG was made. Keys it adds are checked when a Trainer loads it."""
    if not isinstance(extra_config, dict):
        raise TypeError(f"with_common_config takes a dict of config keys, got "
                        f"{type(extra_config).__name__}")
    return deep_merged(_common_config(), extra_config)


def __getattr__(name: str) -> Any:
    if name == "Trainer":  # loads torch: only when asked for
        from rlmesh.driver.algorithm import Algorithm

        return Algorithm
    if name == "COMMON_CONFIG":
        return _common_config()
    raise AttributeError(f"module 'rlmesh.agents.trainer' has no attribute {name!r}")
