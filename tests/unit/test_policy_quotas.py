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
    assert [e["client"] for e in out] == ["real", "real"]  # flood already holds past 5
    assert share.counts()["episodes_over_share"] == {"flood": 30}
    out = share.admit(episodes("real", 20))
    assert 3 <= len(out) <= 4  # to its share of 10 over two clients (one past, from flood's)
    assert share.held["flood"] >= 4
    for _ in range(5):  # both keep reporting: the window rolls, neither holds much more
        share.admit(episodes("flood", 20) + episodes("real", 2))
        assert 4 <= share.held["real"] <= 6 and 4 <= share.held["flood"] <= 6
    assert share.counts()["episodes_reported"]["real"] > 10  # its statistics stay fresh


def test_the_chunk_rate_refuses_a_call_past_a_seconds_worth_naming_the_setting():
    rate = ChunkRate(100.0)
    rate.take("a", 100)
    with pytest.raises(ClientDataError, match="policy_server_max_chunks_per_s"):
        rate.take("a", 50)
    rate.take("b", 100)  # each client has its own
    ChunkRate(None).take("a", 10**6)
