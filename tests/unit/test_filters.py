"""Observation filters: MeanStdFilter's statistics merge exactly across runners, a sync
gives every runner the same state, and a runner's unsynced observations are kept."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlmesh.rl.filters import MeanStdFilter, NoFilter, RunningStat, make_filter


def test_merged_statistics_equal_those_of_all_rows():
    rows = np.random.default_rng(0).normal(3.0, 2.0, size=(1000, 4))
    a, b, merged = MeanStdFilter((4,)), MeanStdFilter((4,)), MeanStdFilter((4,))
    a(rows[:300])
    for r in rows[300:]:  # one at a time, as runners see them
        b(r)
    merged.merge_buffer(a.flush())
    merged.merge_buffer(b.flush())
    assert merged.rs.n == 1000
    np.testing.assert_allclose(merged.rs.mean, rows.mean(0))
    np.testing.assert_allclose(merged.rs.std, rows.std(0, ddof=1))


def test_sync_makes_runners_identical_and_keeps_unflushed_rows():
    rng = np.random.default_rng(1)
    runners = [MeanStdFilter((3,)) for _ in range(3)]
    driver = MeanStdFilter((3,))
    for f in runners:
        f(rng.normal(size=(50, 3)))
    for f in runners:
        driver.merge_buffer(f.flush())
    for f in runners:
        f.set_state(driver.get_state())
    states = [f.get_state() for f in runners]
    for s in states[1:]:
        assert s["n"] == states[0]["n"] == 150
        np.testing.assert_array_equal(s["mean"], states[0]["mean"])
        np.testing.assert_array_equal(s["m2"], states[0]["m2"])
    # Rows seen between a flush and the sync stay in the runner and go at the next flush.
    late = rng.normal(size=(10, 3))
    runners[0].flush()
    runners[0](late)
    runners[0].set_state(driver.get_state())
    assert runners[0].rs.n == 160 and runners[0].flush()["n"] == 10


def test_normalises_clips_and_does_not_update_when_told():
    f = MeanStdFilter((2,))
    f(np.array([[0.0, 10.0], [2.0, 30.0]]))
    out = f(np.array([1.0, 20.0]), update=False)
    assert out.dtype == np.float32 and f.rs.n == 2
    np.testing.assert_allclose(out, [0.0, 0.0], atol=1e-6)
    assert f(np.array([1e9, 20.0]), update=False)[0] == 10.0  # clipped


def test_state_round_trips_as_plain_data():
    f = MeanStdFilter((2,))
    f(np.arange(10.0).reshape(5, 2))
    plain = {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in f.get_state().items()}
    g = MeanStdFilter((2,))
    g.set_state(plain)
    np.testing.assert_array_equal(g(np.ones(2), update=False), f(np.ones(2), update=False))
    assert RunningStat.from_data(plain).n == 5


def test_make_filter_names_the_problem():
    assert isinstance(make_filter("NoFilter", gym.spaces.Discrete(3)), NoFilter)
    with pytest.raises(ValueError, match="float Box"):
        make_filter("MeanStdFilter", gym.spaces.Discrete(3))
    with pytest.raises(ValueError, match="not one of"):
        make_filter("MeanStd", gym.spaces.Box(-1, 1, (2,)))
