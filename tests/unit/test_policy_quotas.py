"""The policy server's per-client quotas (roles/policy_quotas.py): the chunk rate and the
share of the reported episodes, decided without a server."""

from __future__ import annotations

import pytest

from rlmesh.client.episodes import ClientDataError
from rlmesh.roles.policy_quotas import ChunkRate, EpisodeShare


def episodes(client: str, n: int) -> list[dict]:
    return [{"return": 1.0, "length": 1, "client": client} for _ in range(n)]


def test_a_client_alone_has_the_whole_window_and_two_share_it():
    share = EpisodeShare(window=10, active_s=60.0)
    assert len(share.admit(episodes("flood", 30))) == 30  # alone: every episode reported
    out = share.admit(episodes("real", 2) + episodes("flood", 30))
    # flood holds 8, past its 5: it may only replace its own, until real's reach the front
    assert [e["client"] for e in out] == ["real", "real"] + ["flood"] * 8
    assert share.held == {"real": 2, "flood": 8}
    assert share.counts()["episodes_over_share"] == {"flood": 22}
    out = share.admit(episodes("real", 20))
    # its two at the front give way to its first two, then flood's over its share of 5 to
    # the next four (one past 5: flood holds its whole share), until one of flood's at 4
    assert len(out) == 6 and share.held == {"real": 6, "flood": 4}
    for _ in range(5):  # both keep reporting: the window rolls, neither holds much more
        share.admit(episodes("flood", 20) + episodes("real", 2))
        assert 4 <= share.held["real"] <= 6 and 4 <= share.held["flood"] <= 6
    assert share.counts()["episodes_reported"]["real"] > 10  # its statistics stay fresh


def test_a_fast_client_beside_a_slow_one_stays_fresh_in_a_window_never_full():
    """The fuzzing test's case: the real client ends 6 episodes an iteration, a slow one
    (a fuzzer) 1. Capped at half of a window the two had not filled, the real client's
    episodes were all left out after its first 50: episode_reward_mean froze at its
    random-policy value while PPO learned."""
    share = EpisodeShare(window=100, active_s=60.0)
    for _ in range(40):
        out = [e["client"] for e in share.admit(episodes("real", 6) + episodes("slow", 1))]
        assert out.count("slow") == 1 and out.count("real") >= 1
    assert share.counts()["episodes_reported"] == {"real": 230, "slow": 40}
    assert share.held == {"real": 85, "slow": 15}  # full: each replaces mostly its own
    for _ in range(10):  # a third client flooding: no one below its share (34) is refused
        out = [e["client"] for e in share.admit(episodes("real", 6) + episodes("slow", 1)
                                                + episodes("flood", 50))]
        assert out.count("slow") == 1 and share.held["real"] >= 33
    assert share.counts()["episodes_over_share"]["flood"] > 400


def test_the_chunk_rate_refuses_a_call_past_a_seconds_worth_naming_the_setting():
    rate = ChunkRate(100.0)
    rate.take("a", 100)
    with pytest.raises(ClientDataError, match="policy_server_max_chunks_per_s"):
        rate.take("a", 50)
    rate.take("b", 100)  # each client has its own
    ChunkRate(None).take("a", 10**6)
