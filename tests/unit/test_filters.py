"""Observation filters: MeanStdFilter's statistics merge exactly across runners, a sync
gives every runner the same state, and a runner's unsynced observations are kept."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlmesh.rl.filters import (MeanStdFilter, NoFilter, ReturnNormalizer, RunningStat,
                               make_filter)


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


def test_return_normalizer_divides_by_the_std_of_each_envs_discounted_return():
    """VecNormalize(norm_reward)'s rule written out: G <- gamma G + r per env (0 after an
    episode ends), r / sqrt(var(all G so far) + eps), clipped to [-10, 10]."""
    rng = np.random.default_rng(0)
    gamma, num_envs = 0.99, 3
    norm = ReturnNormalizer(num_envs, gamma)
    returns, seen = np.zeros(num_envs), []
    for t in range(300):
        for b in range(num_envs):
            r, ended = float(rng.normal(5.0, 2.0)), bool(rng.random() < 0.02)
            returns[b] = returns[b] * gamma + r
            seen.append(returns[b])
            var = np.var(seen) if len(seen) > 1 else 1.0  # one return has no spread yet
            expected = np.clip(r / np.sqrt(var + 1e-8), -10, 10)
            assert norm(b, r, ended) == pytest.approx(expected, rel=1e-6, abs=1e-9)
            if ended:
                returns[b] = 0.0
    assert norm(0, 1e9, False) == 10.0  # an outlier is clipped


def test_env_sampler_trains_on_normalized_rewards_and_reports_raw_returns():
    from rlmesh.roles.env_sampler import EnvSampler
    from tests.unit.test_env_runner_logic import FnPolicy

    rng = np.random.default_rng(0)

    def random_torque(obs, explore=None):
        n = len(obs)
        return (rng.uniform(-1, 1, (n, 1)).astype(np.float32), np.zeros(n, np.float32),
                np.zeros((n, 2), np.float32))

    make = lambda i: gym.make("Pendulum-v1")  # noqa: E731
    sampler = EnvSampler(make, 2, FnPolicy(random_torque), seeds=[0, 1],
                         reward_normalizer=ReturnNormalizer(2, 0.99))
    frag = sampler.sample(400)  # two whole 200-step episodes per env
    raw_returns = [e["return"] for e in frag["episodes"]]
    trained = frag["rewards"].sum(0)
    assert len(raw_returns) == 4 and all(r < -200 for r in raw_returns)  # Pendulum's scale
    assert np.all(np.abs(frag["rewards"]) <= 10.0)
    # Divided by the discounted return's std (hundreds): far smaller than the raw rewards.
    assert np.all(np.abs(trained) < 0.2 * np.abs(np.sum(raw_returns)) / 2)
