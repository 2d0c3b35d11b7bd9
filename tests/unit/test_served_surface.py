"""The served surface of every role (issue 36): each protocol lists public names only, and
every argument of every served call is annotated with a type the dispatcher checks (plain
``Data`` at the least, for arguments handed on to user code), so that a request whose
argument does not fit is refused before the method runs."""

from __future__ import annotations

import inspect

import pytest

from rlmesh.runtime.actor import table_of
from rlmesh.runtime.protocol import Data
from tests.unit.test_protocol_table import declared_roles, path

# Arguments a role still takes untyped, and why (each one a debt, named here so it shows).
UNTYPED = {
    # The policy service checks these itself against the spaces (roles/policy_checks.py).
    ("rlmesh.roles.policy_service:PolicyService", "start_agent", "agent_id"): "policy_checks",
    ("rlmesh.roles.policy_service:PolicyService", "get_action", "observation"): "policy_checks",
    ("rlmesh.roles.policy_service:PolicyService", "log_action", "observation"): "policy_checks",
    ("rlmesh.roles.policy_service:PolicyService", "log_action", "action"): "policy_checks",
    ("rlmesh.roles.policy_service:PolicyService", "log_returns", "reward"): "policy_checks",
    ("rlmesh.roles.policy_service:PolicyService", "end_episode", "observation"): "policy_checks",
    # Returns [] without looking at them: the envs live in the clients' simulators.
    ("rlmesh.roles.policy_server:PolicyServerRunner", "foreach_env", "args"): "unused",
    ("rlmesh.roles.policy_server:PolicyServerRunner", "call_env_method", "args"): "unused",
    ("rlmesh.roles.policy_server:PolicyServerRunner", "call_env_method", "kwargs"): "unused",
}


class NotData:
    """A value no declared type admits (the codec never makes one; a caller in the same
    process could)."""


def served(cls: type):
    table = table_of(cls, hooks=True)
    for name, entry in table.entries.items():
        for param in entry.signature.parameters.values():
            if param.kind == param.VAR_POSITIONAL:
                check = entry.var_positional
            elif param.kind == param.VAR_KEYWORD:
                check = entry.var_keyword
            else:
                check = entry.keyword.get(param.name, dict(entry.positional).get(param.name))
            yield name, entry, param, check


@pytest.mark.parametrize("cls", declared_roles(), ids=path)
def test_a_role_serves_public_names_only(cls):
    for name in cls.protocol.kinds():
        assert not name.startswith("_"), f"{path(cls)} serves the private {name!r}"
    assert all(not n.startswith("_") for n in table_of(cls, hooks=True).entries)


@pytest.mark.parametrize("cls", declared_roles(), ids=path)
def test_every_argument_of_a_served_call_has_a_type_the_dispatcher_checks(cls):
    for name, entry, param, check in served(cls):
        key = (path(cls), name, param.name)
        if key in UNTYPED:
            continue
        assert check is not None, (
            f"{path(cls)}.{name}: argument {param.name!r} is annotated "
            f"{param.annotation!r}, which the dispatcher does not check; give it a type "
            "(Data for plain data handed on to user code)")
        assert not isinstance(NotData(), check)
        if param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            why = entry.bad_types([], {param.name: NotData()})
            assert why is not None and repr(param.name) in why, why
        elif param.kind == param.VAR_KEYWORD:
            assert entry.bad_types([], {"extra_name": NotData()}) is not None


def test_the_untyped_list_holds_only_arguments_that_exist_untyped():
    roles = {path(c): c for c in declared_roles()}
    for role, call, arg in UNTYPED:
        found = [check for name, _, p, check in served(roles[role])
                 if name == call and p.name == arg]
        assert found == [None], f"{role}.{call}({arg}) is typed now: drop it from UNTYPED"


def test_plain_data_arguments_are_checked_in_star_args_too():
    from rlmesh.roles.env_runner import EnvRunner

    entry = table_of(EnvRunner, hooks=True).entries["foreach_env"]
    assert entry.bad_types(["tests.x:f", 1, [2.0], {"a": None}], {}) is None
    why = entry.bad_types(["tests.x:f", 1, NotData()], {})
    assert why is not None and "*args[1]" in why
    assert entry.var_positional == Data.TYPES
    assert inspect.signature(EnvRunner.apply).parameters["kwargs"].annotation in ("Data", Data)
