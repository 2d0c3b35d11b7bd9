"""The policy server's checks of client values and the rate-limited warnings, without sockets."""

from __future__ import annotations

import logging

import gymnasium as gym
import numpy as np
import pytest

from rlmesh.roles.policy_checks import (ClientDataError, ClientLimits, Rejections,
                                        ReportedEpisodes, check_actions,
                                        check_obs, check_reward, check_summary, finite_as)
from rlmesh.wire import logs


def test_values_are_checked_as_the_float32_they_are_stored_as():
    assert finite_as("x", np.array([1e38]), np.dtype(np.float32)).dtype == np.float32
    for bad in ([1e39], [np.nan], [-np.inf]):
        with pytest.raises(ClientDataError, match="x: has NaN or infinite values"):
            finite_as("x", np.array(bad), np.dtype(np.float32))
    with pytest.raises(ClientDataError, match=r"beyond \+-1000"):
        finite_as("action_logp", np.array([-1e30]), np.dtype(np.float32), 1e3)
    with pytest.raises(ClientDataError, match="observation: has NaN"):
        check_obs(gym.spaces.Box(-1, 1, (2,)), [np.nan, 0.0])


def test_actions_outside_integer_spaces_are_refused_and_box_actions_must_be_finite():
    with pytest.raises(ClientDataError, match=r"actions: \[7, -3\] outside"):
        check_actions(gym.spaces.Discrete(2), np.array([0, 1, 7, -3]))
    with pytest.raises(ClientDataError, match=r"\[3\] outside"):
        check_actions(gym.spaces.MultiDiscrete([2, 3]), np.array([[1, 2], [1, 3]]))
    check_actions(gym.spaces.Discrete(3, start=-1), np.array([-1, 0, 1]))
    check_actions(gym.spaces.Box(-1, 1, (2,)), np.array([[5.0, -5.0]], np.float32))  # as sampled
    with pytest.raises(ClientDataError, match="actions: has NaN"):
        check_actions(gym.spaces.Box(-1, 1, (2,)), np.array([[np.nan, 0]], np.float32))


def test_rewards_and_returns_within_the_limits():
    limits = ClientLimits(max_abs_reward=10.0, max_episode_steps=100)
    assert check_reward(np.float64(9.5), limits) == 9.5
    for bad, match in ((11.0, "policy_server_max_abs_reward"), (1e39, "infinite"),
                       ("1", "must be a number"), (True, "must be a number")):
        with pytest.raises(ClientDataError, match=match):
            check_reward(bad, limits)
    assert check_summary({"return": 1000.0, "length": 100}, limits)["return"] == 1000.0
    with pytest.raises(ClientDataError, match="episode.return"):
        check_summary({"return": 1e300, "length": 1}, limits)
    with pytest.raises(ClientDataError, match="episode.length"):
        check_summary({"return": 1.0, "length": 101}, limits)


def test_rejections_are_counted_per_client_and_bounded_in_clients():
    rejections = Rejections()
    for i in range(300):
        rejections.count(f"c{i}", "actions")
    rejections.count("c0", "reward")
    counts = rejections.snapshot()
    assert counts["c0"] == {"actions": 1, "reward": 1} and len(counts) == 257
    assert counts["other"] == {"actions": 300 - 256} and rejections.total == 301


def test_warnings_of_one_kind_are_rate_limited_with_the_suppressed_count(caplog):
    log = logging.getLogger("test.rate")
    with caplog.at_level(logging.WARNING, "test.rate"):
        shown = sum(logs.log_limited(log, "k", "bad %d", i) for i in range(1000))
        logs._budgets[("test.rate", "k")].tokens = 1  # as if a second had passed
        logs.log_limited(log, "k", "bad again")
    assert logs.BURST <= shown <= logs.BURST + 2 and len(caplog.records) == shown + 1
    assert caplog.records[-1].getMessage() == f"bad again ({1000 - shown} more like it suppressed)"


def ended(eid, rewards, claim_return, claim_length):
    return {"episode_id": eid, "rewards": np.asarray(rewards, np.float32),
            "episode": {"return": claim_return, "length": claim_length, "custom_metrics": {}}}


def middle(eid, rewards):
    return {"episode_id": eid, "rewards": np.asarray(rewards, np.float32), "episode": None}


def test_reported_returns_are_the_sums_of_the_steps_sent_never_the_claim():
    book = ReportedEpisodes(max_open=100, max_open_per_client=10)
    chunks = [middle("a", [1.0, 0.1]), ended("a", [0.3], 1.4000001, 3)]
    book.commit("sim", book.settle("sim", chunks))
    assert chunks[1]["episode"]["length"] == 3
    assert chunks[1]["episode"]["return"] == pytest.approx(1.4, rel=1e-6)
    assert not book.sums  # an ended episode is forgotten
    # an episode split over two calls adds up too
    book.commit("sim", book.settle("sim", [middle("b", [1.0] * 4)]))
    (last,) = chunks = [ended("b", [1.0, 1.0], 6.0, 6)]
    book.commit("sim", book.settle("sim", chunks))
    assert last["episode"] == {"return": 6.0, "length": 6, "custom_metrics": {}, "client": "sim"}


def test_a_claim_the_steps_contradict_is_refused_and_changes_nothing():
    book = ReportedEpisodes(max_open=100, max_open_per_client=10)
    book.commit("sim", book.settle("sim", [middle("a", [1.0] * 4)]))
    before = dict(book.sums)
    with pytest.raises(ClientDataError, match=r"^episode.return: claims 1e\+09; .* sum to 5"):
        book.settle("sim", [ended("a", [1.0], 1e9, 5)])
    with pytest.raises(ClientDataError, match=r"^episode.length: claims 2 steps; .* hold 5"):
        book.settle("sim", [ended("a", [1.0], 2.0, 2)])
    assert book.sums == before
    # another client's claim on the same id finds no steps of its own: not reported
    chunks = [ended("a", [], 4.0, 4)]
    book.commit("other", book.settle("other", chunks))
    assert chunks[0]["episode"] is None and book.unverified == 1


def test_reported_sums_are_bounded_per_client_and_in_all():
    book = ReportedEpisodes(max_open=5, max_open_per_client=3)
    for i in range(10):
        book.commit("a", book.settle("a", [middle(f"a{i}", [1.0])]))
    assert list(book.by_client["a"]) == ["a7", "a8", "a9"] and len(book.sums) == 3
    for i in range(3):
        book.commit(f"c{i}", book.settle(f"c{i}", [middle("x", [1.0])]))
    assert len(book.sums) == 5 and ("a", "a7") not in book.sums
    assert sum(len(v) for v in book.by_client.values()) == 5
