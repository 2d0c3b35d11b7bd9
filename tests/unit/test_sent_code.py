"""The trust rule for code named by a message (runtime/import_path.py ``SentCode``), the
names ``code_names`` finds for the checkpoint check (env modules named by env_config too),
and the checks of a message adding or removing a policy (roles/policy_changes.py): pure
logic, no processes."""

from __future__ import annotations

import os
import sys

import pytest

from rlmesh.algorithms import PPOConfig
from rlmesh.config.settings import ConfigError
from rlmesh.roles.policy_changes import checked_policy_id, checked_settings, checked_spec
from rlmesh.runtime.import_path import SentCode, code_names, user_module

SCRIPT = os.path.abspath(__file__)
TRUST = SentCode({"tests", "rlmesh"}, SCRIPT)


def public_fn(env, *args):
    return "ran"


@pytest.mark.parametrize("path, words", [
    ("/tmp/evil.py:f", "names a file"),
    ("rlmesh.runtime.import_path:_main_module", "'_main_module' is not a public name"),
    ("rlmesh.runtime.import_path:script_module", "rlmesh's own functions are not run"),
    ("rlmesh.code:run_script", "rlmesh's own functions are not run"),
    ("tests._private.mod:f", "'_private' is not a public name"),
    ("tests.unit.test_sent_code:public_fn.__globals__", "'__globals__' is not a public name"),
    ("__mp_main__:_hidden", "'_hidden' is not a public name"),
    ("evilpkg.mod:f", "package 'evilpkg' is not one this process was started with"),
    ("os:system", "package 'os' is not one"),
])
def test_a_message_naming_other_code_is_refused_before_any_import(path, words):
    before = set(sys.modules)
    with pytest.raises(PermissionError, match=words):
        TRUST.check(path, "foreach_env function")
    assert set(sys.modules) == before  # nothing was imported to decide


def test_a_function_of_the_packages_and_the_script_it_was_started_with_resolves():
    assert TRUST.resolve("tests.unit.test_sent_code:public_fn", "fn") is public_fn
    TRUST.check(f"{SCRIPT}:public_fn", "fn")  # the run's script, by its file (not run here)
    TRUST.check("__mp_main__:public_fn", "fn")
    with pytest.raises(ValueError, match="must look like"):
        TRUST.check("no_colon", "fn")


def test_a_name_that_reaches_through_an_import_into_other_code_is_refused():
    # tests.unit.test_sent_code imports os and sys: public names, but not functions of it
    with pytest.raises(PermissionError, match="not a function defined in"):
        TRUST.resolve("tests.unit.test_sent_code:os.system", "fn")
    with pytest.raises(PermissionError, match="not a function defined in"):
        TRUST.resolve("tests.unit.test_sent_code:pytest.main", "fn")


def test_policy_specs_may_name_rlmesh_classes_but_no_file_and_no_private_name():
    TRUST.check_data({"policy_class": "rlmesh.policy.torch_policy:TorchPolicy"}, "spec")
    with pytest.raises(PermissionError, match="names a file"):
        TRUST.check_data({"config": {"model": {"custom_model": "/x/evil.py:Net"}}}, "spec")
    with pytest.raises(PermissionError, match="not a public name"):
        TRUST.check_data({"runner_class": "rlmesh.runtime.import_path:_attribute"}, "spec")


def test_code_names_sees_a_module_an_env_factory_imports_by_name():
    pytest.importorskip("pettingzoo")
    pz = "rlmesh.env.pettingzoo:make"
    found = list(code_names({"config": {"env": pz, "env_config": {"name": "evilpkg.envs"}}}))
    assert ("config.env_config.name", "evilpkg.envs") in found
    for own in ("classic.rps_v2", "pettingzoo.classic.rps_v2", "classic/rps-v2"):
        assert not [v for _, v in code_names({"env": pz, "env_config": {"name": own}})
                    if v == own], own
    # an evaluation override of env_config under the same env is seen as well
    nested = {"env": pz, "evaluation_config": {"env_config": {"name": "evilpkg"}}}
    assert ("evaluation_config.env_config.name", "evilpkg") in list(code_names(nested))
    assert user_module("pettingzoo", "classic.rps_v2") is None
    assert user_module("pettingzoo", "my_pkg.env") == "my_pkg.env"
    with pytest.raises(PermissionError, match="not one this process was started with"):
        TRUST.check_data({"env": pz, "env_config": {"name": "evilpkg"}}, "settings")


# --- add_policy / remove_policy messages ---

@pytest.fixture
def config():
    return PPOConfig().environment("CartPole-v1").multi_agent(policies={"a", "b"})


@pytest.mark.parametrize("settings, words", [
    ({"lr": "junk", "gamma": None}, "'lr' cannot be changed by a message"),
    ({"policies_to_train": 5}, "policies_to_train: expected None, a list"),
    ({"policies_to_train": ["a", 3]}, "policies_to_train: expected"),
    ({"policy_mapping_fn": ["x"]}, "policy_mapping_fn: expected None or an import path"),
    ({"policies": {"a": {"policy_class": "x", "evil": 1}}}, "policies: expected"),
    ({"policy_mapping_fn": "/tmp/evil.py:f"}, "names a file"),
    ({"policy_mapping_fn": "tests.unit.test_sent_code:no_such_fn"}, "has no attribute"),
    ({"policy_mapping_fn": "tests.unit.test_sent_code:SCRIPT"}, "is not a function"),
])
def test_settings_from_a_message_are_checked_and_nothing_is_half_applied(config, settings, words):
    before = config.to_dict()
    with pytest.raises((ConfigError, PermissionError, ValueError), match=words):
        checked_settings(config, settings, TRUST, SCRIPT)
    assert config.to_dict() == before


def test_good_settings_come_back_in_a_copy(config):
    new = checked_settings(config, {"policies_to_train": ["a"],
                                    "policy_mapping_fn": "tests.unit.test_sent_code:public_fn"},
                           TRUST, SCRIPT)
    assert new.policies_to_train == ["a"] and config.policies_to_train is None


def test_a_policy_id_and_a_spec_are_checked(config):
    with pytest.raises(KeyError, match="no policy 'nope' here"):
        checked_policy_id("nope", {"a": 1}, exists=True)
    with pytest.raises(ValueError, match="exists already"):
        checked_policy_id("a", {"a": 1}, exists=False)
    with pytest.raises(ValueError, match="non-empty string"):
        checked_policy_id("", {}, exists=False)
    spec = {"policy_class": "rlmesh.policy.torch_policy:TorchPolicy",
            "runner_class": "rlmesh.policy.numpy_mlp:NumpyMLPPolicy",
            "observation_space": None, "action_space": None, "config": {}}
    checked_spec(spec, config, TRUST, "policy_class")
    with pytest.raises(ValueError, match="not a Policy subclass"):
        checked_spec({**spec, "policy_class": "tests.unit.test_sent_code:public_fn"}, config,
                     TRUST, "policy_class")
    with pytest.raises(ValueError, match="unknown key 'evil'"):
        checked_spec({**spec, "evil": 1}, config, TRUST, "runner_class")
    with pytest.raises(ConfigError, match="lr"):
        checked_spec({**spec, "config": {"lr": "junk"}}, config, TRUST, "runner_class")
    with pytest.raises(PermissionError, match="names a file"):  # checked though not built here
        checked_spec({**spec, "policy_class": "/x/evil.py:P"}, config, TRUST, "runner_class")
