"""RLlib's episode API (SingleAgentEpisode, MultiAgentEpisode): getters and setters with
RLlib's index rules, and the callbacks' Episode and the samplers' episodes as such."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlmesh.callbacks import Callbacks, Episode
from rlmesh.env.multi_agent_episode import MultiAgentEpisode
from rlmesh.env.single_agent_episode import SingleAgentEpisode


def _episode(steps: int = 4) -> SingleAgentEpisode:
    """Observations 0..steps (as arrays), actions 10.., rewards 1.0, 2.0, ..."""
    e = SingleAgentEpisode()
    e.add_env_reset(np.array([0.0]), {"i": 0})
    for t in range(steps):
        e.add_env_step(np.array([t + 1.0]), 10 + t, float(t + 1), {"i": t + 1},
                       terminated=t == steps - 1, extra_model_outputs={"logp": -0.5 * t})
    return e


def test_lengths_return_and_flags():
    e = _episode(4)
    assert len(e) == 4 and e.t == e.env_t == 4 and e.t_started == 0
    assert len(e.get_observations()) == 5 and len(e.get_actions()) == 4
    assert e.get_return() == 1 + 2 + 3 + 4
    assert e.is_terminated and e.is_done and not e.is_truncated
    with pytest.raises(ValueError, match="done"):
        e.add_env_step(np.array([9.0]), 0, 0.0)
    assert isinstance(e.id_, str) and e.id_ != SingleAgentEpisode().id_


def test_int_slice_and_list_indices():
    e = _episode(4)
    assert e.get_observations(-1)[0] == 4.0
    assert e.get_observations(0)[0] == 0.0
    assert e.get_actions(-1) == 13 and e.get_actions(0) == 10
    assert e.get_rewards(-2) == 3.0
    assert e.get_infos(-1) == {"i": 4}
    assert [o[0] for o in e.get_observations(slice(-3, None))] == [2.0, 3.0, 4.0]
    assert e.get_rewards(slice(1, 3)) == [2.0, 3.0]
    assert e.get_actions([0, -1]) == [10, 13]
    assert e.get_extra_model_outputs("logp", -1) == -1.5
    with pytest.raises(IndexError):
        e.get_actions(4)
    with pytest.raises(IndexError):
        e.get_actions(-5)
    with pytest.raises(KeyError, match="vf_preds"):
        e.get_extra_model_outputs("vf_preds")


def test_fill_and_lookback():
    e = _episode(2)
    assert e.get_rewards(-5, fill=0.0) == 0.0
    assert e.get_rewards(slice(-4, None), fill=0.0) == [0.0, 0.0, 1.0, 2.0]
    filled = e.get_observations(slice(-5, None), fill=-1.0)
    assert [o[0] for o in filled] == [-1.0, -1.0, 0.0, 1.0, 2.0]
    assert filled[0].shape == (1,)
    # Data handed to the constructor is lookback (RLlib's "auto"); the getters leave it out.
    e = SingleAgentEpisode(observations=[0, 1, 2], actions=["a", "b"], rewards=[1.0, 2.0])
    assert len(e) == 0 and e.get_return() == 0.0 and e.get_observations() == [2]
    e.add_env_step(3, "c", 5.0)
    assert e.get_observations() == [2, 3] and e.get_actions() == ["c"] and e.get_return() == 5.0
    assert e.get_actions(-1) == "c"
    assert e.get_actions(-1, neg_index_as_lookback=True) == "b"
    assert e.get_observations(slice(-2, 1), neg_index_as_lookback=True) == [0, 1, 2]
    e = SingleAgentEpisode(observations=[0, 1, 2], actions=["a", "b"], rewards=[1.0, 2.0],
                           len_lookback_buffer=1)
    assert len(e) == 1 and e.get_return() == 2.0 and e.get_actions() == ["b"]


def test_setters_rewrite_in_place():
    e = _episode(3)
    e.set_observations(new_data=np.array([42.0]), at_indices=-1)
    assert e.get_observations(-1)[0] == 42.0 and e.get_observations(-2)[0] == 2.0
    e.set_actions(new_data=[7, 8], at_indices=[0, 1])
    assert e.get_actions() == [7, 8, 12]
    e.set_rewards(new_data=10.0, at_indices=-1)
    assert e.get_rewards() == [1.0, 2.0, 10.0] and e.get_return() == 13.0
    with pytest.raises(ValueError, match="2 new values for 1"):
        e.set_rewards(new_data=[1.0, 2.0], at_indices=[0])
    with pytest.raises(IndexError):
        e.set_actions(new_data=0, at_indices=5)


def test_state_round_trip_and_numpy():
    e = _episode(3)
    e.custom_data["x"] = 1
    back = SingleAgentEpisode.from_state(e.get_state())
    assert back.id_ == e.id_ and back.custom_data == {"x": 1}
    assert back.get_actions() == e.get_actions() and back.get_return() == e.get_return()
    assert back.is_terminated == e.is_terminated and len(back) == len(e)
    e.to_numpy()
    obs = e.get_observations(slice(0, 2))
    assert isinstance(obs, np.ndarray) and obs.shape == (2, 1)
    assert e.get_rewards([0, 2]).tolist() == [1.0, 3.0]


def test_one_hot_discrete_getters():
    e = SingleAgentEpisode(observation_space=gym.spaces.MultiDiscrete([2, 3]),
                           action_space=gym.spaces.Discrete(3, start=1))
    e.add_env_reset(np.array([1, 2]))
    e.add_env_step(np.array([0, 0]), 3, 1.0)
    e.add_env_step(np.array([1, 1]), 1, 1.0)
    assert e.get_actions(-1, one_hot_discrete=True).tolist() == [1, 0, 0]  # start=1
    assert e.get_actions(-1) == 1  # as stored without it
    assert [a.tolist() for a in e.get_actions(one_hot_discrete=True)] == [[0, 0, 1], [1, 0, 0]]
    # positions before the start are filled with zeros: no category set
    padded = e.get_actions(slice(-3, None), fill=0, one_hot_discrete=True)
    assert [a.tolist() for a in padded] == [[0, 0, 0], [0, 0, 1], [1, 0, 0]]
    assert e.get_actions(-5, fill=0, one_hot_discrete=True).tolist() == [0, 0, 0]
    assert [a.tolist() for a in e.get_actions([0, -1], one_hot_discrete=True)] == \
        [[0, 0, 1], [1, 0, 0]]
    assert e.get_observations(0, one_hot_discrete=True).tolist() == [0, 1, 0, 0, 1]
    e.to_numpy()
    stacked = e.get_actions(slice(-3, None), fill=0, one_hot_discrete=True)
    assert isinstance(stacked, np.ndarray) and stacked.tolist() == padded_list(padded)
    # a space that is not discrete: entries as they are
    box = SingleAgentEpisode(action_space=gym.spaces.Box(-1, 1, (2,)))
    box.add_env_reset(np.zeros(1))
    box.add_env_step(np.zeros(1), np.array([0.5, -0.5]), 0.0)
    assert box.get_actions(-1, one_hot_discrete=True).tolist() == [0.5, -0.5]


def padded_list(arrays):
    return [a.tolist() for a in arrays]


def test_callbacks_episode_is_a_single_agent_episode_with_old_names():
    e = Episode(0, 7, history=True)
    assert isinstance(e, SingleAgentEpisode)
    e.add_env_reset(np.zeros(2), {"r": 1})
    e.record_step(np.ones(2), 1.5, {}, action=1)
    e.record_step(np.full(2, 2.0), 0.5, {}, action=0, truncated=True)
    assert len(e) == e.length == 2 and e.get_return() == e.total_reward == 2.0
    assert e.get_actions() == [1, 0] and e.get_rewards(-1) == 0.5
    assert e.get_observations(-1) is e.last_observation and e.is_truncated
    assert e.custom_data is e.user_data
    e.set_observations(new_data=np.full(2, 9.0), at_indices=-1)
    assert e.last_observation_for()[0] == 9.0
    assert e.summary()["return"] == 2.0
    # Without history (no callbacks, no connectors) a step costs counters only.
    bare = Episode(0, 8)
    bare.add_env_reset(np.zeros(2))
    bare.record_step(np.ones(2), 1.0, {}, action=1)
    assert len(bare) == 1 and bare.last_observation[0] == 1.0
    with pytest.raises(RuntimeError, match="no step history"):
        bare.get_observations(-1)


def test_multi_agent_episode_getters():
    e = MultiAgentEpisode(agent_module_ids={"a": "p0", "b": "p1"})
    e.add_env_reset(observations={"a": 0, "b": 100})
    e.add_env_step({"a": 1, "b": 101}, {"a": "x", "b": "y"}, {"a": 1.0, "b": 2.0})
    e.add_env_step({"a": 2}, {"a": "x"}, {"a": 1.0, "b": 0.5},
                   terminateds={"b": True})
    assert len(e) == 2 and e.env_t == 2 and e.agent_ids == {"a", "b"}
    # -1: the agents with an entry from the env's last step ("b" did not act in it).
    assert e.get_observations(-1) == {"a": 2}
    assert e.get_observations(-1, agent_ids=["b"]) == {}
    assert e.get_observations(0) == {"a": 0, "b": 100}
    assert e.get_rewards() == {"a": [1.0, 1.0], "b": [2.0]}
    assert e.get_return() == 4.0  # b's reward without an action of its own is not kept
    assert e.module_for("b") == "p1" and e.agent_episodes["a"].module_id == "p0"
    assert e.agent_episodes["b"].get_actions() == ["y"]
    e.add_env_step({"a": 3}, {"a": "x"}, {"a": 1.0}, terminateds={"__all__": True})
    assert e.is_terminated and e.is_done and e.agent_episodes["a"].is_terminated


class _Recorder(Callbacks):
    def __init__(self):
        self.seen = []

    def on_episode_step(self, *, episode, metrics_logger, env, env_index, **kwargs):
        self.seen.append((len(episode), episode.get_observations(-1).copy(),
                          episode.get_actions(-1), episode.get_rewards(-1)))
        metrics_logger.log_value("steps", 1, reduce="sum")
        assert isinstance(env, gym.Env)


def test_env_sampler_episode_history_matches_the_fragment():
    from rlmesh.roles.env_sampler import EnvSampler
    from tests.unit.test_env_runner_logic import FnPolicy

    rng = np.random.default_rng(0)

    def random_fn(obs, explore=None):
        n = len(obs)
        return (rng.integers(0, 2, n), np.full(n, -0.7, np.float32),
                np.zeros((n, 2), np.float32))

    rec = _Recorder()
    sampler = EnvSampler(lambda i: gym.make("CartPole-v1"), 1, FnPolicy(random_fn), seeds=[0],
                         callbacks=rec)
    assert sampler.keep_history
    fragment = sampler.sample(20)
    assert [s[0] for s in rec.seen][:3] == [1, 2, 3]
    ends = np.flatnonzero(fragment["terminateds"][:, 0] | fragment["truncateds"][:, 0])
    first_len = int(ends[0]) + 1 if len(ends) else 20
    # the actions the episode recorded are the fragment's
    assert [s[2] for s in rec.seen[:first_len]] == fragment["actions"][:first_len, 0].tolist()
    assert sampler.metrics_logger.peek("steps") == 20
    # without callbacks no history is kept
    bare = EnvSampler(lambda i: gym.make("CartPole-v1"), 1, seeds=[0])
    assert not bare.keep_history


def test_rllib_import_paths_name_one_class():
    from rlmesh.algorithms.callbacks import DefaultCallbacks
    from rlmesh.callbacks.callbacks import RLlibCallback

    assert DefaultCallbacks is RLlibCallback is Callbacks
