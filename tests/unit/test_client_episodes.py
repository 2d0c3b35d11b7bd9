"""Client-reported episodes cut into chunks, and chunks laid out as fragments the learner
takes: step completion, cuts mid-episode with the right bootstrap observation, episode
ends, silent clients, and the errors a bad call gets."""

from __future__ import annotations

import numpy as np
import pytest

from rlmesh.client.episodes import Episodes, check_reward, fragment_from_chunks
from rlmesh.rl.columns import ColumnSpec, action_dist_columns, merge_fragments

SPECS = {"obs": ColumnSpec((2,), np.dtype(np.float32)), "actions": ColumnSpec((), np.dtype(np.int64)),
         **action_dist_columns(2), "rewards": ColumnSpec((), np.dtype(np.float32))}


def obs(i):
    return np.array([i, -i], np.float32)


def play(episodes, eid, first, steps, reward=1.0):
    """``steps`` actions from observations first, first+1, ...; each rewarded."""
    for i in range(first, first + steps):
        episodes.act(eid, obs(i), i % 2, -0.5, np.array([0.1, 0.2], np.float32))
        episodes.reward(eid, reward)


def test_a_terminated_episode_becomes_one_chunk_with_its_summary():
    eps = Episodes(chunk_len=10)
    eid = eps.start()
    play(eps, eid, 0, 3)
    summary = eps.end(eid, obs(3))
    (chunk,) = eps.take_chunks()
    np.testing.assert_array_equal(chunk["obs"], [obs(0), obs(1), obs(2)])
    np.testing.assert_array_equal(chunk["actions"], [0, 1, 0])
    np.testing.assert_array_equal(chunk["rewards"], [1, 1, 1])
    assert chunk["terminated"] and not chunk["truncated"]
    assert summary["return"] == 3.0 and summary["length"] == 3 and chunk["episode"] == summary
    assert eid not in eps.open and eps.counters["episodes_ended"] == 1


def test_long_episodes_are_cut_and_each_cut_bootstraps_from_the_next_observation():
    eps = Episodes(chunk_len=2)
    eid = eps.start("sim-1")
    play(eps, eid, 0, 5)
    eps.end(eid, obs(5), truncated=True)
    chunks = eps.take_chunks()
    assert [len(c["rewards"]) for c in chunks] == [2, 2, 1]
    np.testing.assert_array_equal(chunks[0]["next_obs"], obs(2))
    np.testing.assert_array_equal(chunks[1]["obs"], [obs(2), obs(3)])
    np.testing.assert_array_equal(chunks[1]["next_obs"], obs(4))
    assert not any(c["terminated"] or c["truncated"] for c in chunks[:2])
    assert chunks[2]["truncated"] and not chunks[2]["terminated"]
    np.testing.assert_array_equal(chunks[2]["next_obs"], obs(5))
    assert [c["episode"] is None for c in chunks] == [True, True, False]
    assert chunks[2]["episode"]["length"] == 5


def test_cut_open_takes_complete_steps_and_keeps_the_one_in_progress():
    eps = Episodes(chunk_len=100)
    eid = eps.start()
    play(eps, eid, 0, 3)  # steps 0 and 1 complete, 2 in progress
    eps.cut_open()
    (chunk,) = eps.take_chunks()
    assert len(chunk["rewards"]) == 2 and not chunk["terminated"]
    np.testing.assert_array_equal(chunk["next_obs"], obs(2))
    eps.end(eid, obs(3))
    (rest,) = eps.take_chunks()
    np.testing.assert_array_equal(rest["obs"], [obs(2)])
    assert rest["episode"]["length"] == 3 and rest["episode"]["return"] == 3.0


def test_a_silent_clients_episode_expires_as_a_truncation_without_its_open_step():
    eps = Episodes(chunk_len=100)
    eid = eps.start()
    play(eps, eid, 0, 4)
    assert eps.expire(timeout_s=60) == []  # not yet
    assert eps.expire(timeout_s=1, now=eps.open[eid].last_seen + 2) == [eid]
    (chunk,) = eps.take_chunks()
    assert len(chunk["rewards"]) == 3 and chunk["truncated"]
    np.testing.assert_array_equal(chunk["next_obs"], obs(3))
    assert eps.counters["episodes_expired"] == 1 and eps.counters["steps_discarded"] == 1
    with pytest.raises(KeyError, match="closed after its client went silent"):
        eps.act(eid, obs(4), 0, 0.0, np.zeros(2, np.float32))


def test_bad_calls_are_refused_and_change_nothing():
    eps = Episodes(chunk_len=4)
    with pytest.raises(KeyError, match="unknown episode id 'nope'"):
        eps.act("nope", obs(0), 0, 0.0, np.zeros(2))
    eid = eps.start("a")
    with pytest.raises(ValueError, match="already open"):
        eps.start("a")
    with pytest.raises(ValueError, match="log_returns before any action"):
        eps.reward(eid, 1.0)
    for bad in ("1", None, float("nan"), float("inf"), True, [1.0]):
        with pytest.raises((TypeError, ValueError), match="reward: must be"):
            check_reward(bad)
    assert check_reward(np.float32(2.5)) == 2.5 and check_reward(3) == 3.0
    assert eps.open[eid].steps == [] and eps.chunks == []


def test_episodes_without_training_record_nothing():
    eps = Episodes(chunk_len=2)
    eid = eps.start(training_enabled=False)
    play(eps, eid, 0, 5)
    summary = eps.end(eid, obs(5))
    assert eps.take_chunks() == [] and summary["length"] == 5


def test_chunks_as_a_fragment_the_learner_merges():
    eps = Episodes(chunk_len=3)
    done, cut = eps.start(), eps.start()
    play(eps, done, 0, 2)
    eps.end(done, obs(2))
    play(eps, cut, 10, 4)  # chunk of 3 cut at the 4th action, the 4th in progress
    eps.cut_open()  # nothing more: no complete step since the cut
    chunks = eps.take_chunks()
    frag = fragment_from_chunks(chunks, SPECS)
    assert frag["obs"].shape == (3, 2, 2) and frag["action_dist_inputs"].shape == (3, 2, 2)
    np.testing.assert_array_equal(frag["mask"], [[True, True], [True, True], [False, True]])
    np.testing.assert_array_equal(frag["terminateds"][:, 0], [False, True, True])  # padding too
    np.testing.assert_array_equal(frag["truncateds"][:, 1], [False, False, True])
    np.testing.assert_array_equal(frag["next_obs"][1], obs(13))  # full length: next_obs
    assert frag["trunc_index"].shape == (0, 2) and frag["env_steps"] == 5
    assert [e["length"] for e in frag["episodes"]] == [2]
    batch = merge_fragments([frag])
    assert batch["obs"].shape == (3, 2, 2) and batch["mask"].sum() == 5


def test_a_short_cut_chunk_bootstraps_through_trunc_obs():
    eps = Episodes(chunk_len=10)
    a, b = eps.start(), eps.start()
    play(eps, a, 0, 4)
    play(eps, b, 20, 2)
    eps.cut_open()
    frag = fragment_from_chunks(eps.take_chunks(), SPECS)
    np.testing.assert_array_equal(frag["trunc_index"], [[0, 1]])
    np.testing.assert_array_equal(frag["trunc_obs"], [obs(21)])
    np.testing.assert_array_equal(frag["next_obs"][0], obs(3))


def test_nothing_to_report_is_an_empty_fragment():
    frag = fragment_from_chunks([], SPECS)
    assert frag["obs"].shape == (0, 0, 2) and frag["env_steps"] == 0 and frag["episodes"] == []


def test_each_policy_server_runner_has_its_own_address():
    from rlmesh.roles.policy_server import public_address

    assert public_address("9900", 0) == public_address("9900", 1) == "tcp://127.0.0.1:9900"
    assert public_address("tcp://127.0.0.1:9900", 3) == "tcp://127.0.0.1:9902"
    assert public_address("ipc:///tmp/sim", 2) == "ipc:///tmp/sim.1"


def test_past_the_caps_the_least_recently_used_episode_is_closed_without_an_end():
    eps = Episodes(chunk_len=100, max_open=3, max_open_per_client=2, max_steps=3)
    a1, a2 = eps.start("a1", client="a"), eps.start("a2", client="a")
    play(eps, a1, 0, 2)  # a1 used last: a2 is the one to go
    eps.start("a3", client="a")
    assert set(eps.open) == {"a1", "a3"} and eps.counters["episodes_evicted"] == 1
    eps.start("b1", client="b")
    eps.start("b2", client="b")  # 4 open over all: the oldest of all (a1) goes
    assert set(eps.open) == {"a3", "b1", "b2"} and eps.counters["episodes_evicted"] == 2
    (chunk,) = eps.take_chunks()  # a1's one complete step, truncated, and no episode end
    assert chunk["truncated"] and chunk["episode"] is None and len(chunk["rewards"]) == 1
    play(eps, "b1", 0, 3)
    with pytest.raises(ValueError, match="policy_server_max_episode_steps"):
        eps.act("b1", obs(3), 0, 0.0, np.zeros(2, np.float32))
    assert eps.by_client == {"a": {"a3": None}, "b": {"b2": None, "b1": None}}


def test_a_recurrent_policys_state_lives_with_its_episode_and_goes_with_it():
    """Each episode reads the state its own last step left (and its own previous action
    and reward), each step records both states; a closed episode's state is gone."""
    init = [np.zeros(3, np.float32)]
    eps = Episodes(chunk_len=2, max_open=2, initial_state=init, prev_action=np.int64(0),
                   prev_reward=True)
    a, b = eps.start("a"), eps.start("b")
    for t in range(3):  # a counts up and takes action 1, b counts down and takes action 0
        for eid, sign, action in ((a, 1, 1), (b, -1, 0)):
            inputs = eps.step_inputs(eid)
            assert inputs["state_in_0"][0] == sign * t
            assert inputs["prev_actions"] == (0 if t == 0 else action)
            assert inputs["prev_rewards"] == (0.0 if t == 0 else sign * (t - 1))
            eps.act(eid, obs(t), action, -0.5, np.zeros(2, np.float32), inputs,
                    [inputs["state_in_0"] + sign])
            eps.reward(eid, sign * t)
    eps.end(a, obs(3))
    a01, b01, a2 = eps.take_chunks()
    np.testing.assert_array_equal(a01["state_in_0"][:, 0], [0, 1])
    np.testing.assert_array_equal(a01["state_out_0"][:, 0], [1, 2])
    np.testing.assert_array_equal(b01["state_out_0"][:, 0], [-1, -2])
    np.testing.assert_array_equal(b01["prev_actions"], [0, 0])
    np.testing.assert_array_equal(a2["prev_actions"], [1])
    np.testing.assert_array_equal(a2["prev_rewards"], [1])
    state = ColumnSpec((3,), np.dtype(np.float32))
    fragment = fragment_from_chunks([a01, b01, a2], {
        **SPECS, "state_in_0": state, "state_out_0": state,
        "prev_actions": ColumnSpec((), np.dtype(np.int64)),
        "prev_rewards": ColumnSpec((), np.dtype(np.float32))})
    assert fragment["state_in_0"].shape == (2, 3, 3)
    np.testing.assert_array_equal(fragment["state_in_0"][:, 2, 0], [2, 0])  # a2, then padding
    eps.start("c")
    eps.start("d")  # past max_open: b, the least recently used, is closed with its state
    with pytest.raises(KeyError):
        eps.step_inputs(b)
    eps.start("b")  # a new episode of the same id starts from the initial state
    assert not eps.step_inputs("b")["state_in_0"].any()


def test_a_stateless_policy_has_no_step_inputs_and_no_state_columns():
    eps = Episodes(chunk_len=10)
    eid = eps.start()
    assert eps.step_inputs(eid) == {}
    play(eps, eid, 0, 2)
    eps.end(eid, obs(2))
    (chunk,) = eps.take_chunks()
    assert not any(k.startswith(("state_", "prev_")) for k in chunk)


def test_every_chunk_names_its_episode_and_a_step_holds_at_most_max_step_reward():
    eps = Episodes(chunk_len=2, max_step_reward=1.0)
    eid = eps.start("sim-7")
    play(eps, eid, 0, 3)  # 1.0 a step: at the bound
    eps.act(eid, obs(3), 0, -0.5, np.array([0.1, 0.2], np.float32))
    eps.reward(eid, 0.5)
    with pytest.raises(ValueError, match=r"^reward: the rewards logged for one step sum to 1.5"):
        eps.reward(eid, 1.0)  # a step's rewards add up: 1,000 calls made one step 1e9
    eps.reward(eid, -1.5)
    eps.end(eid, obs(4))
    chunks = eps.take_chunks()
    assert [c["episode_id"] for c in chunks] == ["sim-7", "sim-7"]
    assert chunks[-1]["episode"]["return"] == 2.0 and chunks[-1]["episode"]["length"] == 4
