"""inference_mode "auto": central inference only for a conv policy with a GPU or a spare core
to run it, and only when the runner's own forward pass (measured at build) costs more than a
quarter of an env step; the choice says why."""

from __future__ import annotations

import pytest

from rlmesh.algorithms.ppo import PPOConfig
from rlmesh.driver.inference_choice import FORWARD_SHARE, choose_inference
from rlmesh.env.registry import spaces_of
from rlmesh.roles.env_runner import default_policy_specs


def specs(config):
    """The run's policy specs, as the driver makes them for a single-agent env."""
    obs_space, action_space = spaces_of(config.env, config.env_config, model=config.model)
    return default_policy_specs(obs_space, action_space, config)


def test_asked_modes_are_taken_as_asked():
    config = PPOConfig().environment("CartPole-v1").env_runners(inference_mode="central")
    assert choose_inference(config, specs(config))["mode"] == "central"


def test_a_flat_policy_acts_in_its_runners():
    config = PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=2)
    choice = choose_inference(config, specs(config))
    assert choice["mode"] == "runner" and "not a conv policy" in choice["reason"]


def test_a_conv_policy_goes_central_only_where_it_pays():
    pytest.importorskip("ale_py.vector_env")
    config = (PPOConfig().environment("ALE/Pong-v5", env_config={"atari": {"vector": True}})
              .env_runners(num_env_runners=1, num_envs_per_env_runner=4)
              .learners(num_cpus_per_learner=0))  # leaves a core spare on 2 cores
    choice = choose_inference(config, specs(config))
    if choice["spare_cores"] < 1 and not choice["gpu"]:
        assert choice["mode"] == "runner" and "no GPU and no spare core" in choice["reason"]
        return
    assert choice["forward_ms_per_obs"] > 0 and choice["env_ms_per_step"] > 0
    pays = choice["forward_ms_per_obs"] >= FORWARD_SHARE * choice["env_ms_per_step"]
    assert choice["mode"] == ("central" if pays else "runner"), choice
    crowded = config.copy().env_runners(num_env_runners=8)  # no core left over
    if not choice["gpu"]:
        assert choose_inference(crowded, specs(crowded))["mode"] == "runner"


def test_central_inference_for_several_policies_is_refused_in_one_line():
    config = (PPOConfig().environment("CartPole-v1").env_runners(inference_mode="central")
              .multi_agent(policies=["a", "b"], policy_mapping_fn=lambda aid, *a, **k: "a"))
    two = {"a": {}, "b": {}}
    with pytest.raises(ValueError, match="multi-agent runs and policy servers act in their"):
        choose_inference(config, two)
