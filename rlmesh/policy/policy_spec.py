"""``PolicySpec``: which policy class, spaces and config overrides one policy id has, as
plain data when it crosses to runner and learner processes (classes by import path)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

from rlmesh.env.registry import as_space, space_from_data, space_to_data
from rlmesh.runtime.import_path import import_object
from rlmesh.policy.policy import Policy, PolicyError, check_policy_class, class_path


@dataclass
class PolicySpec:
    """RLlib's PolicySpec: ``policy_class`` (a class or ``"pkg.mod:Cls"``; None: the
    algorithm's default), the spaces (None: the env's) and ``config`` overrides."""

    policy_class: Any = None
    observation_space: Any = None
    action_space: Any = None
    config: dict[str, Any] = field(default_factory=dict)

    def resolved(self, default_class: Any, obs_space: Any, action_space: Any) -> "PolicySpec":
        """This spec with the class imported and checked and the spaces filled in."""
        cls = self.policy_class or default_class
        if isinstance(cls, str):
            try:
                cls = import_object(cls, "policy_class")
            except (ValueError, ImportError) as e:
                raise PolicyError(str(e)) from None
        check_policy_class(cls, "policy_class")
        return PolicySpec(cls, as_space(self.observation_space or obs_space),
                          as_space(self.action_space or action_space), dict(self.config))

    def to_data(self, algo_config: Any) -> dict[str, Any]:
        """Plain data for other processes; ``runner_class`` is the class runners act with."""
        cls: type[Policy] = self.policy_class
        return {"policy_class": class_path(cls), "runner_class": _runner_class(cls, algo_config, self.observation_space,
                                                  self.action_space),
                "observation_space": space_to_data(self.observation_space),
                "action_space": space_to_data(self.action_space), "config": self.config}


def _runner_class(cls: type[Policy], config: Any, obs_space: Any, action_space: Any) -> str:
    """``cls.runner_class`` given the spaces, where it takes them (older overrides take
    only the config)."""
    try:
        inspect.signature(cls.runner_class).bind(config, obs_space, action_space)
    except TypeError:
        return cls.runner_class(config)
    return cls.runner_class(config, obs_space, action_space)


def build_policy_from_data(data: dict[str, Any], algo_config: Any, *, runner: bool,
                           **kwargs: Any) -> Policy:
    """The policy ``to_data`` described, built here: the runner's class or the learner's."""
    cls = import_object(data["runner_class" if runner else "policy_class"], "policy class")
    config = algo_config
    if data.get("config"):
        config = algo_config.copy()
        config.update_from_dict(data["config"])
    return cls(space_from_data(data["observation_space"]), space_from_data(data["action_space"]),
               config, **kwargs)
