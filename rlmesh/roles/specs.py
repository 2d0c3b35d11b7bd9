"""What each role's process is started with, typed: one dataclass per role, sent on the wire as
plain data (``to_data``) and decoded by the role (``from_data``). The user's config travels as
they wrote it (``cfg.to_dict()``); what the driver adds (its config class, the policy specs,
the env registry, the code a message may name) has a field of its own."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, TypeVar

from rlmesh.runtime.import_path import import_object, named_roots, startup_code

S = TypeVar("S", bound="Spec")

# The config keys a runner was once handed its extras under (``rlmesh serve``, a user's own
# runner): read into a RunnerSpec's fields by ``RunnerSpec.from_config_dict``.
LEGACY_KEYS = {"_env_registry": "env_registry", "_config_class": "config_class",
               "_policy_specs": "policy_specs", "_code_roots": "code_roots",
               "_main_script": "main_script", "_inference_actor": "inference_actor"}


@dataclass(frozen=True)
class Spec:
    """A role's start-up data; subclasses add the role's fields (all plain data)."""

    config: dict[str, Any]  # the user's config as written (``cfg.to_dict()``)
    config_class: str | None = None  # its class's import path; None: the shared settings

    def to_data(self) -> dict[str, Any]:
        """Plain data for the wire (msgpack-safe: dicts, lists, strings, numbers)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_data(cls: type[S], data: dict[str, Any] | S) -> S:
        """The spec ``to_data`` encoded (a spec passes through: a role built in-process)."""
        if isinstance(data, cls):
            return data
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise TypeError(f"{cls.__name__}: unknown fields {sorted(unknown)}; "
                            f"it has {sorted(names)}")
        return cls(**data)

    def settings(self) -> Any:
        """The algorithm's config object (its class named by ``config_class``; the shared
        settings alone when none is named, unknown keys left out)."""
        from rlmesh.config.base import AlgorithmConfig

        if self.config_class is not None:
            return import_object(self.config_class, "config class").from_dict(self.config)
        known = {spelling for s in AlgorithmConfig.fields_table()
                 for spelling in (s.name, s.key, *s.aliases)}
        return AlgorithmConfig.from_dict({k: v for k, v in self.config.items() if k in known})


def config_fields(cfg: Any) -> dict[str, Any]:
    """``config`` and ``config_class`` of a spec for the config object ``cfg``."""
    from rlmesh.policy.policy import class_path

    return {"config": cfg.to_dict(), "config_class": class_path(type(cfg))}


@dataclass(frozen=True)
class RunnerSpec(Spec):
    """An env runner's (and an evaluation, ES or policy-server runner's, and the central
    inference actor's): which runner it is, the policies it acts with, where its weights
    come from, and the code messages may name there (``import_path.SentCode``)."""

    worker_index: int = 1  # from 1; 0: the runner in the driver process
    param_server: str | None = "param_server"  # None: weights only by set_weights
    policy_specs: dict[str, Any] | None = None  # None: one default policy
    env_registry: dict[str, str] = field(default_factory=dict)
    code_roots: list[str] = field(default_factory=list)
    main_script: str | None = None
    inference_actor: str | None = None  # central inference: that actor's name
    # Where weights come from when ``param_server`` (its node's relay) cannot be reached.
    weights_fallback: str | None = None

    @classmethod
    def for_run(cls, cfg: Any, policy_specs: dict[str, Any] | None, **fields: Any
                ) -> RunnerSpec:
        """The spec of a runner of the driver's run: its config, the env registry, and the
        code the driver may later name to it (``startup_code``)."""
        from rlmesh.env.registry import env_registry

        base = cls(**config_fields(cfg), policy_specs=policy_specs, env_registry=env_registry())
        code = startup_code(base.named_data())
        return dataclasses.replace(base, code_roots=code["_code_roots"],
                                   main_script=code["_main_script"], **fields)

    @classmethod
    def from_config_dict(cls, config: dict[str, Any], **fields: Any) -> RunnerSpec:
        """A spec from a config dict carrying its extras under underscore keys (the form
        ``rlmesh serve`` and a runner made by hand use)."""
        config = dict(config)
        extras = {LEGACY_KEYS[k]: config.pop(k) for k in list(config) if k in LEGACY_KEYS}
        extras = {k: v for k, v in extras.items() if v is not None}
        return cls(config=config, **extras, **fields)

    def named_data(self) -> dict[str, Any]:
        """Everything of this spec that may name code (config, policies, env creators)."""
        return {"config": self.config, "policies": self.policy_specs or {},
                "envs": self.env_registry}

    def trusted_roots(self) -> set[str]:
        """The packages messages may name code from: those the driver named at start and
        those this spec itself names."""
        return set(self.code_roots) | named_roots(self.named_data())


def runner_spec(data: dict[str, Any] | RunnerSpec) -> RunnerSpec:
    """A runner's spec from what it was started with: ``RunnerSpec`` data, or a config dict
    with underscore extras (``RunnerSpec.from_config_dict``)."""
    if isinstance(data, RunnerSpec):
        return data
    if "config" in data and isinstance(data["config"], dict) and "worker_index" in data:
        return RunnerSpec.from_data(data)
    return RunnerSpec.from_config_dict(data)


@dataclass(frozen=True)
class LearnerSpec(Spec):
    """A learner actor's: its rank of ``world_size`` data-parallel ranks and the policies;
    ``to_data`` is the actor's constructor arguments (roles/learner_actor.py)."""

    policy_specs: dict[str, Any] = field(default_factory=dict)
    rank: int = 0
    world_size: int = 1
    code_roots: list[str] = field(default_factory=list)
    main_script: str | None = None

    def to_data(self) -> dict[str, Any]:
        data = super().to_data()
        data["config_cls"] = data.pop("config_class")  # the learner actor's own name for it
        return data


@dataclass(frozen=True)
class AggregatorSpec(Spec):
    """An aggregator's: the learners it feeds, round robin."""

    learners: list[str] = field(default_factory=list)
    index: int = 0


@dataclass(frozen=True)
class ShardSpec(Spec):
    """A replay shard's: its index of ``num_replay_buffer_shards`` and the spaces (as data)
    of the transitions it stores."""

    obs_space: Any = None
    action_space: Any = None
    index: int = 0


@dataclass(frozen=True)
class RelaySpec(Spec):
    """A weight relay's (roles/weight_relay.py): the actor it takes weights from (the param
    server, or the relay above it in a tree), the node it serves and that node's runners."""

    upstream: str = "param_server"
    node: str = ""
    index: int = 0
    runners: list[str] = field(default_factory=list)
    policies: list[str] = field(default_factory=list)  # the policy ids it relays from the start
