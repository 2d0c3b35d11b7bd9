"""The multi_agent settings: every accepted form of policies stored as plain data, functions
by import path (a lambda refused in one line), policies_to_train as a list or a function,
and the default mapping."""

from __future__ import annotations

import gymnasium as gym
import pytest

from rlmesh.algorithms.ppo import PPOConfig, PPOTorchPolicy
from rlmesh.config.multi_agent import mapping_function, trainable
from rlmesh.policy.policy_spec import PolicySpec


def only_even(policy_id, batch=None):
    return policy_id.endswith(("0", "2"))


def to_b(agent_id, episode):
    return "b"


def test_policies_in_every_form_become_plain_data_that_round_trips():
    box = gym.spaces.Box(-1, 1, (3,))
    cfg = PPOConfig().multi_agent(policies={
        "a": None,
        "b": PolicySpec(PPOTorchPolicy, box, gym.spaces.Discrete(2), {"lr": 0.1}),
        "c": (None, None, None, {"gamma": 0.5}),
    }, policy_mapping_fn=to_b, policies_to_train=only_even)
    data = cfg.to_dict()
    assert data["policies"]["b"]["policy_class"] == "rlmesh.algorithms.ppo.ppo:PPOTorchPolicy"
    assert data["policies"]["b"]["observation_space"]["type"] == "Box"
    assert data["policies"]["c"]["config"] == {"gamma": 0.5}
    assert data["policy_mapping_fn"] == f"{__name__}:to_b"
    again = PPOConfig.from_dict(data)
    assert again.to_dict()["policies"] == data["policies"] and again.is_multi_agent
    assert mapping_function(again, again.policies)("any", None) == "b"


def test_a_set_of_ids_is_sorted_so_each_policy_keeps_its_seed():
    cfg = PPOConfig().multi_agent(policies={"z", "a", "m"})
    assert list(cfg.policies) == ["a", "m", "z"]


def test_policies_to_train_as_list_or_function():
    cfg = PPOConfig().multi_agent(policies_to_train=["p1"])
    assert trainable(cfg, "p1") and not trainable(cfg, "p0")
    cfg = PPOConfig().multi_agent(policies_to_train=only_even)
    assert cfg.policies_to_train == f"{__name__}:only_even"
    assert trainable(cfg, "p0") and not trainable(cfg, "p1")
    assert trainable(PPOConfig(), "anything")  # None: all train


def test_default_mapping_is_the_only_policy_or_default_policy():
    assert mapping_function(PPOConfig(), ["solo"])(7, None) == "solo"
    assert mapping_function(PPOConfig(), ["a", "b"])(7, None) == "default_policy"


def test_a_lambda_mapping_is_kept_as_a_token_this_process_resolves():
    fn = lambda a, e: "x"  # noqa: E731
    cfg = PPOConfig().multi_agent(policies={"x"}, policy_mapping_fn=fn)
    assert cfg.policy_mapping_fn.startswith("<local ") and "<lambda>" in cfg.policy_mapping_fn
    assert mapping_function(cfg, ["x"])(0, None) == "x"
