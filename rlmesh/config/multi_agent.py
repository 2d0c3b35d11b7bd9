"""The multi_agent group (RLlib's ``.multi_agent()``): the policies, which agent each acts
for, and which of them train.
Mixed into AlgorithmConfig; each setting is declared here once, as in base.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from rlmesh.config.settings import _UNSET, setting

DEFAULT_POLICY_ID = "default_policy"


@dataclass(kw_only=True)
class MultiAgentSettings:
    policies: Any = setting(
        None, "multi_agent",
        doc="The policy ids of a multi-agent run: a set/list of ids (each the algorithm's "
            "policy on the spaces of the agents mapped to it), or a dict id -> PolicySpec "
            "(or None, or a dict with policy_class, observation_space, action_space and "
            "config overrides). None: one 'default_policy' acting for every agent.")
    policy_mapping_fn: Any = setting(
        None, "multi_agent",
        doc="fn(agent_id, episode) -> policy id, called once per agent and episode: a "
            "function (a lambda too: this machine's processes are handed it) or its import "
            "path 'pkg.module:fn' (what a launched cluster needs). "
            "None: every agent acts with the only policy (or 'default_policy').")
    policies_to_train: Any = setting(
        None, "multi_agent",
        doc="The policy ids the learners update: a list, or fn(policy_id, batch=None) -> "
            "bool (a function, or its import path). Others act but are never updated "
            "(their weights stay bit-identical). None: every policy trains.")
    count_steps_by: Literal["env_steps", "agent_steps"] = setting(
        "env_steps", "multi_agent",
        doc="What train_batch_size counts in a multi-agent run: env steps (one per step of "
            "an env, however many agents acted) or agent steps (one per agent action).")

    def multi_agent(self, *, policies=_UNSET, policy_mapping_fn=_UNSET,
                    policies_to_train=_UNSET, count_steps_by=_UNSET, **kwargs):
        """Set the multi_agent group (see ``fields_table("multi_agent")``). Policy specs and
        functions are stored as plain data (import paths, or runtime/handed.py's tokens
        for lambdas), as they cross processes."""
        if policies is not _UNSET and policies is not None:
            policies = policies_as_data(policies)
        if callable(policy_mapping_fn):
            policy_mapping_fn = function_path(policy_mapping_fn, "policy_mapping_fn")
        if callable(policies_to_train):
            policies_to_train = function_path(policies_to_train, "policies_to_train")
        elif policies_to_train not in (_UNSET, None):
            policies_to_train = list(policies_to_train)
        return self._set("multi_agent", {"policies": policies, "policy_mapping_fn": policy_mapping_fn,
                                         "policies_to_train": policies_to_train,
                                         "count_steps_by": count_steps_by, **kwargs})

    @property
    def is_multi_agent(self) -> bool:
        return self.policies is not None


def function_path(fn: Any, what: str) -> str:
    """The import path of a module-level function; a lambda or a nested one gets a token
    that this machine's processes are handed (rlmesh.runtime.handed)."""
    from rlmesh.runtime.import_path import MAIN, path_of
    from rlmesh.runtime import handed

    name = getattr(fn, "__qualname__", repr(fn))
    if handed.needs_handing(fn):
        return handed.token_for(fn)
    if getattr(fn, "__module__", None) in ("__main__", MAIN):
        return f"{MAIN}:{name}"
    return path_of(fn, what)


def policies_as_data(policies: Any) -> dict[str, dict[str, Any]]:
    """``policies`` in any accepted form as ``{policy_id: {policy_class, observation_space,
    action_space, config}}``, classes and spaces as plain data (None: from the algorithm
    and the env)."""
    from rlmesh.env.registry import as_space, space_to_data
    from rlmesh.policy.policy import class_path
    from rlmesh.policy.policy_spec import PolicySpec

    if isinstance(policies, (set, frozenset)):  # sorted: each policy's seed is its position
        policies = sorted(policies)
    if isinstance(policies, (list, tuple)):
        policies = {pid: None for pid in policies}
    if not isinstance(policies, dict):
        raise TypeError(f"policies: expected a set of ids or a dict id -> PolicySpec, got {policies!r}")
    out = {}
    for pid, spec in policies.items():
        if spec is None:
            spec = PolicySpec()
        elif isinstance(spec, dict):
            spec = PolicySpec(**spec)
        elif isinstance(spec, (tuple, list)):  # RLlib's old (cls, obs_space, act_space, config)
            spec = PolicySpec(*spec)
        cls = spec.policy_class
        out[str(pid)] = {
            "policy_class": class_path(cls) if isinstance(cls, type) else cls,
            "observation_space": None if spec.observation_space is None
            else space_to_data(as_space(spec.observation_space)),
            "action_space": None if spec.action_space is None
            else space_to_data(as_space(spec.action_space)),
            "config": dict(spec.config or {})}
    return out


def resolve_function(fn: Any, what: str, main_script: str | None = None) -> Any:
    """A function given by itself or by import path; ``__mp_main__:name`` is a function of
    the script the run was started from (``main_script`` in a process of its own)."""
    if fn is None or callable(fn):
        return fn
    from rlmesh.runtime.import_path import MAIN, import_object, script_module

    module, _, name = fn.partition(":")
    if module in (MAIN, "__main__"):
        if main_script is None:  # this process runs the script itself (the driver)
            import os
            import sys

            main = getattr(sys.modules.get("__main__"), "__file__", None)
            main_script = os.path.abspath(main) if main else None
        return getattr(script_module(what, fn, main_script), name)
    return import_object(fn, what)


def mapping_function(config: Any, policy_ids: Any, main_script: str | None = None) -> Any:
    """The config's ``policy_mapping_fn``; none: every agent to the only policy (or to
    'default_policy')."""
    fn = resolve_function(config.policy_mapping_fn, "policy_mapping_fn", main_script)
    if fn is not None:
        return fn
    ids = list(policy_ids)
    only = ids[0] if len(ids) == 1 else DEFAULT_POLICY_ID
    return lambda agent_id, episode=None, **kw: only


def trainable(config: Any, policy_id: str, main_script: str | None = None) -> bool:
    """Whether ``policy_id`` is in ``policies_to_train`` (a function of the run's script
    found in ``main_script`` in a process of its own, as ``resolve_function``)."""
    spec = config.policies_to_train
    if spec is None:
        return True
    if isinstance(spec, (list, tuple, set)):
        return policy_id in spec
    return bool(resolve_function(spec, "policies_to_train", main_script)(policy_id, None))
