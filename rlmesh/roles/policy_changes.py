"""What an env runner or a learner does for policies added or removed while training
(self-play leagues): check the message (the policy id, the spec's code under the trust rule
of runtime/import_path.py's ``SentCode``, the settings by the config's own machinery), then
build or drop the policy and take the new multi-agent settings (mapping function,
policies_to_train). Nothing changes until everything is checked."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlmesh.config.settings import ConfigError
from rlmesh.policy.policy_spec import build_policy_from_data

if TYPE_CHECKING:
    from rlmesh.config.base import AlgorithmConfig
    from rlmesh.runtime.import_path import SentCode

#: The settings a message that adds or removes a policy may change: the ones the driver
#: sends (driver/policies.py), never ``lr``, ``gamma`` or any other.
MESSAGE_SETTINGS = ("policies", "policy_mapping_fn", "policies_to_train")
SPEC_KEYS = ("policy_class", "runner_class", "observation_space", "action_space", "config")


def checked_policy_id(policy_id: Any, policies: dict[str, Any], *, exists: bool) -> str:
    """``policy_id`` if it is a non-empty string that names a policy held (``exists``) or
    one not held yet; else a one-line error."""
    if not isinstance(policy_id, str) or not policy_id:
        raise ValueError(f"a policy id is a non-empty string, got {policy_id!r}")
    if exists and policy_id not in policies:
        raise KeyError(f"no policy {policy_id!r} here (there are {sorted(policies)})")
    if not exists and policy_id in policies:
        raise ValueError(f"policy {policy_id!r} exists already (there are {sorted(policies)})")
    return policy_id


def checked_spec(spec: dict[str, Any], config: AlgorithmConfig, trust: SentCode | None,
                 builds: str) -> None:
    """A policy spec sent in a message (``PolicySpec.to_data``): its keys, its code under
    the trust rule (``trust``; None: the caller is this process), the class this process
    builds (``builds``: "runner_class" on a runner, "policy_class" on a learner; the other
    is not imported, so that a numpy runner never loads torch) a policy, and its config
    overrides valid settings. Imports only what the trust rule lets through."""
    from rlmesh.policy.policy import Policy
    from rlmesh.runtime.import_path import import_object

    unknown = sorted(set(spec) - set(SPEC_KEYS))
    if unknown:
        raise ValueError(f"policy spec: unknown key {unknown[0]!r} (a spec has {', '.join(SPEC_KEYS)})")
    for key in ("policy_class", "runner_class"):
        if not isinstance(spec.get(key), str):
            raise ValueError(f"policy spec: {key} must be an import path, got {spec.get(key)!r}")
    overrides = spec.get("config") or {}
    if not isinstance(overrides, dict):
        raise ValueError(f"policy spec: config must be a dict, got {type(overrides).__name__}")
    if trust is not None:
        trust.check_data(spec, "policy spec")
    cls = import_object(spec[builds], f"policy spec {builds}")
    if not (isinstance(cls, type) and issubclass(cls, Policy)):
        raise ValueError(f"policy spec: {builds} {spec[builds]!r} is not a Policy subclass")
    if overrides:
        merged = config.copy().update_from_dict(overrides)
        merged.validate()


def _is_ids(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)


# What each setting a message may change must be (their config fields take anything a user
# writes in Python: functions, sets, PolicySpecs; a message brings plain data only).
_SHAPES = {
    "policies": (lambda v: v is None or isinstance(v, dict) and all(
        isinstance(k, str) and (s is None or isinstance(s, dict) and set(s) <= set(SPEC_KEYS))
        for k, s in v.items()), "None or a dict policy id -> spec data"),
    "policy_mapping_fn": (lambda v: v is None or isinstance(v, str), "None or an import path"),
    "policies_to_train": (lambda v: v is None or isinstance(v, str) or _is_ids(v),
                          "None, a list of policy ids or an import path"),
}


def checked_settings(config: AlgorithmConfig, settings: dict[str, Any], trust: SentCode | None,
                     main_script: str | None = None) -> AlgorithmConfig:
    """A copy of ``config`` with ``settings`` taken, once each key is one a message may
    change, each value has the shape its setting takes, the code named passes the trust
    rule, the functions named resolve, and the whole config validates; else a one-line
    error and ``config`` untouched."""
    from rlmesh.config.multi_agent import resolve_function

    for key, value in settings.items():
        if key not in MESSAGE_SETTINGS:
            raise ConfigError(f"{key!r} cannot be changed by a message adding or removing a "
                              f"policy (it may change {', '.join(MESSAGE_SETTINGS)})")
        ok, shape = _SHAPES[key]
        if not ok(value):
            raise ConfigError(f"{key}: expected {shape}, got {value!r}")
    if trust is not None:
        trust.check_data(settings, "multi_agent settings")
    new = config.copy().update_from_dict(settings)
    new.validate()
    for key in ("policy_mapping_fn", "policies_to_train"):
        if isinstance(settings.get(key), str):
            if not callable(resolve_function(settings[key], key, main_script)):
                raise ConfigError(f"{key}: {settings[key]!r} is not a function")
    return new


def take_settings(config: AlgorithmConfig, new: AlgorithmConfig) -> None:
    """The checked settings of ``new`` into ``config``, in place (others hold it)."""
    for key in MESSAGE_SETTINGS:
        setattr(config, key, getattr(new, key))


class MultiAgentPolicies:
    """Mixed into EnvRunner: ``add_policy`` / ``remove_policy`` called by the driver."""

    policies: dict[str, Any]
    versions: dict[str, int]
    config: AlgorithmConfig
    sampler: Any
    _main_script: str | None
    _sent_code: SentCode
    _inbox: dict[str, Any]

    def _wanted_versions(self) -> dict[str, int]:
        """A multi-agent runner asks only for the policies its agents have acted with, and
        for those it never loaded: a league of frozen snapshots costs a runner nothing for
        the snapshots it does not play (one first used later acts, for one fragment, with
        the weights it was loaded with)."""
        from rlmesh.roles.multi_agent_sampler import MultiAgentSampler

        if not isinstance(self.sampler, MultiAgentSampler) or not self.sampler.used_policies:
            return dict(self.versions)
        used = self.sampler.used_policies
        return {pid: v for pid, v in self.versions.items() if pid in used or v < 0}

    def _bind(self) -> None:
        """The sampler takes the policies and the mapping function (resolved once already,
        by ``checked_settings``)."""
        from rlmesh.roles.multi_agent_sampler import MultiAgentSampler, bind_policies

        if isinstance(self.sampler, MultiAgentSampler):
            bind_policies(self.sampler, self.policies, self.config, self._main_script)

    def add_policy(self, policy_id: str, spec: dict[str, Any], settings: dict[str, Any]) -> None:
        """A new policy (weights follow from the param server), then ``settings``; all
        checked first, nothing changed on a refusal."""
        checked_policy_id(policy_id, self.policies, exists=False)
        checked_spec(spec, self.config, self._sent_code, "runner_class")
        new = checked_settings(self.config, settings, self._sent_code, self._main_script)
        policy = build_policy_from_data(spec, self.config, runner=True)
        self.policies[policy_id] = policy
        self.versions[policy_id] = -1
        take_settings(self.config, new)
        self._bind()

    def remove_policy(self, policy_id: str, settings: dict[str, Any]) -> None:
        """Drop a policy; episodes in which an agent acts with it are discarded first."""
        from rlmesh.roles.multi_agent_sampler import MultiAgentSampler

        checked_policy_id(policy_id, self.policies, exists=True)
        if len(self.policies) == 1:
            raise ValueError(f"policy {policy_id!r} is this runner's only policy; add another first")
        new = checked_settings(self.config, settings, self._sent_code, self._main_script)
        take_settings(self.config, new)
        self.policies.pop(policy_id)
        self.versions.pop(policy_id, None)
        self._inbox.pop(policy_id, None)  # a push of its weights not yet taken
        if getattr(self, "policy_id", None) == policy_id:  # the runner's "main" policy id
            self.policy_id = next(iter(self.policies))
            self.sampler.policy = self.policies[self.policy_id]
        self._bind()  # the new episodes below map without it
        if isinstance(self.sampler, MultiAgentSampler):
            self.sampler.drop_episodes_of(policy_id)
