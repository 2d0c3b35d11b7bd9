"""RLlib's older callbacks dict (seed 000) on today's hooks, without processes: the info
dict each function gets, the episode accessors, and the dict's bad input in one line."""

from __future__ import annotations

import pytest

from rlmesh.callbacks import Episode, FunctionCallbacks, load_callbacks, summarize_hist_data
from rlmesh.config.settings import ConfigError


class Runner:
    """What a function sees as the env runner: the user's envs and the policies."""

    user_envs = ["env-0", "env-1"]
    policies = {"default_policy": "the policy"}


def test_each_hook_gets_the_info_dict_of_rllibs_older_api():
    seen = []
    callbacks = load_callbacks({name: (lambda info, name=name: seen.append((name, info)))
                                for name in ("on_episode_start", "on_episode_step",
                                             "on_episode_end", "on_sample_end",
                                             "on_postprocess_traj", "on_train_result")})
    episode = Episode(1, 7, observation=[0.0, 0.0, 0.1, 0.0])
    callbacks.on_episode_start(episode=episode, env_runner=Runner(), env_index=1)
    episode.record_step([0.0, 0.0, -0.2, 0.0], 1.0, {"k": 1}, action=1)
    callbacks.on_episode_step(episode=episode, env_runner=Runner(), env_index=1)
    callbacks.on_episode_end(episode=episode, env_runner=Runner(), env_index=1)
    batch = {"rewards": [1.0]}
    callbacks.on_postprocess_trajectory(env_runner=Runner(), policy_id="default_policy",
                                        policies=Runner.policies, postprocessed_batch=batch)
    callbacks.on_sample_end(env_runner="runner", samples=batch)
    callbacks.on_train_result(algorithm="algo", result={"x": 1})
    info = dict(seen)
    assert info["on_episode_start"] == {"env": "env-1", "episode": episode,
                                        "policy": Runner.policies}
    assert set(info["on_episode_step"]) == {"env", "episode"}
    assert info["on_postprocess_traj"]["post_batch"] is batch
    assert info["on_postprocess_traj"]["pre_batch"] == ("the policy", batch)
    assert info["on_sample_end"] == {"worker": "runner", "samples": batch}
    assert info["on_train_result"] == {"trainer": "algo", "result": {"x": 1}}
    assert episode.last_observation_for()[2] == -0.2 and episode.last_action_for() == 1
    assert episode.last_reward_for() == 1.0 and episode.last_info_for() == {"k": 1}


def test_hist_data_joins_the_episodes_lists_beside_rewards_and_lengths():
    a, b = Episode(0, 0), Episode(1, 1)
    a.hist_data["angle"] = [0.1, 0.2]
    b.hist_data["angle"] = [0.3]
    a.record_step(None, 2.0, {})
    stats = summarize_hist_data([a.summary(), b.summary()])
    assert stats == {"episode_reward": [2.0, 0.0], "episode_lengths": [1, 0],
                     "angle": [0.1, 0.2, 0.3]}


def test_bad_input_is_one_line():
    with pytest.raises(ConfigError, match="'on_episode_ended' is not a callback of the dict "
                                          "form; its keys are on_episode_start, ") as err:
        load_callbacks({"on_episode_ended": print})
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="on_train_result is 3, not a function"):
        load_callbacks({"on_train_result": 3})
    assert load_callbacks({"on_episode_start": None}) is None  # RLlib's defaults: all None
    assert isinstance(load_callbacks({"on_episode_start": "builtins:print"}), FunctionCallbacks)
    with pytest.raises(KeyError, match="a single-agent episode has one agent, 'agent0'"):
        Episode(0, 0).last_observation_for("player_1")
