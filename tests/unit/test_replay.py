"""Replay memory: the ring buffer, prioritized sampling, n-step transitions across fragments."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlmesh.rl.nstep import NStepBuilder
from rlmesh.rl.replay import (PrioritizedReplayBuffer, ReplayBuffer, ReplayMemoryError,
                              SumTree, columns_nbytes, transition_columns)

SPECS = transition_columns(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2))


def batch(start: int, n: int) -> dict[str, np.ndarray]:
    ids = np.arange(start, start + n)
    return {"obs": np.repeat(ids[:, None], 3, 1).astype(np.float32), "actions": ids % 2,
            "rewards": ids.astype(np.float32), "next_obs": np.zeros((n, 3), np.float32),
            "terminateds": np.zeros(n, bool), "discounts": np.ones(n, np.float32)}


def test_ring_buffer_wraps_and_keeps_the_newest():
    buf = ReplayBuffer(5, SPECS, seed=0)
    buf.add(batch(0, 3))
    idx = buf.add(batch(3, 4))  # wraps: 3, 4 at the end, 5, 6 over 0, 1
    assert idx.tolist() == [3, 4, 0, 1]
    assert len(buf) == 5 and buf.next_index == 2 and buf.num_added == 7
    assert sorted(buf.columns["rewards"].tolist()) == [2, 3, 4, 5, 6]
    buf.add(batch(10, 12))  # more than the capacity at once: the newest 5
    assert sorted(buf.columns["rewards"].tolist()) == [17, 18, 19, 20, 21]
    sample = buf.sample(1000)
    assert set(sample["rewards"].tolist()) == {17, 18, 19, 20, 21}
    assert (sample["obs"][:, 0] == sample["rewards"]).all()  # rows stay together


def test_memory_is_bounded_and_reported():
    buf = ReplayBuffer(1000, SPECS)
    raw = columns_nbytes(1000, SPECS)
    assert buf.size_bytes == raw == 1000 * (3 * 4 * 2 + 8 + 4 + 1 + 4)
    for i in range(30):
        buf.add(batch(i * 100, 100))
    assert buf.size_bytes == raw and len(buf) == 1000


def test_a_buffer_larger_than_the_machine_is_refused_with_the_figure():
    import psutil

    too_many = int(psutil.virtual_memory().total // (3 * 4 * 2 + 17)) * 4
    with pytest.raises(ReplayMemoryError, match=r"needs [\d.]+ GiB but this machine has"):
        ReplayBuffer(too_many, SPECS)


def test_sum_tree_sums_and_finds():
    tree = SumTree(5)
    tree.set(np.arange(5), np.array([1.0, 2.0, 3.0, 4.0, 0.5]))
    assert tree.total == pytest.approx(10.5) and tree.min == 0.5
    assert tree.find(np.array([0.0, 0.99, 1.0, 2.99, 3.0, 5.99, 6.0, 9.99, 10.2])).tolist() == \
        [0, 0, 1, 1, 2, 2, 3, 3, 4]
    tree.set(np.array([1]), np.array([0.0]))
    assert tree.total == pytest.approx(8.5)
    assert 1 not in tree.find(np.linspace(0, 8.49, 1000)).tolist()


def test_prioritized_sampling_matches_the_priorities():
    buf = PrioritizedReplayBuffer(8, SPECS, alpha=0.5, eps=0.0, seed=1)
    buf.add(batch(0, 6))
    buf.update_priorities(np.arange(6), np.array([1.0, 4.0, 9.0, 16.0, 0.25, 0.0]))
    expected = np.sqrt([1.0, 4.0, 9.0, 16.0, 0.25, 0.0])
    expected /= expected.sum()
    counts = np.zeros(6)
    for _ in range(40):
        s = buf.sample(1000, beta=1.0)
        counts += np.bincount(s["batch_indexes"], minlength=6)
    freq = counts / counts.sum()
    assert np.abs(freq - expected).max() < 0.01
    assert counts[5] == 0  # zero priority is never drawn
    # Importance weights: (N * P(i))^-beta normalised by the largest possible.
    s = buf.sample(256, beta=1.0)
    p = expected[s["batch_indexes"]]
    want = (6 * p) ** -1.0 / (6 * expected[expected > 0].min()) ** -1.0
    np.testing.assert_allclose(s["weights"], want, rtol=1e-5)
    assert s["weights"].max() <= 1.0


def test_new_transitions_get_the_highest_priority_so_far():
    buf = PrioritizedReplayBuffer(16, SPECS, alpha=1.0, eps=0.0, seed=2)
    buf.add(batch(0, 4))
    buf.update_priorities(np.arange(4), np.array([0.1, 0.1, 0.1, 5.0]))
    buf.add(batch(4, 1))  # priority 5, as the highest seen
    counts = np.bincount(buf.sample(20000)["batch_indexes"], minlength=5)
    assert abs(counts[4] / counts[3] - 1) < 0.1


def test_sum_tree_over_many_blocks_follows_the_priorities():
    # 40000 leaves (not a power of 2: 65536 in the tree) pass both find's prefix search over
    # one level (SEARCH_LEVEL: 16384 nodes) and the level-by-level descent under it.
    rng = np.random.default_rng(3)
    values = rng.exponential(size=40000) * (rng.random(40000) < 0.9)  # a tenth never drawn
    tree = SumTree(40000)
    assert tree.depth > tree.cut
    tree.set(np.arange(40000), values)
    assert tree.total == pytest.approx(values.sum(), rel=1e-12)
    assert tree.min == values[values > 0].min()
    bounds = np.concatenate([[0.0], np.cumsum(values)])
    mass = rng.random(20000) * values.sum()
    want = np.searchsorted(bounds, mass, side="right") - 1
    assert np.array_equal(tree.find(mass), want)  # exactly the leaf the prefix sums say
    # Updates (an index given twice keeps one value) leave the sums and the minimum right.
    idx = rng.integers(0, 40000, 3000)
    new = rng.exponential(size=3000)
    tree.set(idx, new)
    values[idx] = tree.values[idx]
    assert set(np.unique(tree.values[idx])) <= set(new)
    assert tree.total == pytest.approx(values.sum(), rel=1e-12)
    assert tree.min == values[values > 0].min()


def test_sum_tree_minimum_follows_its_leaf_written_over():
    tree = SumTree(3000)
    tree.set(np.arange(3000), np.linspace(1.0, 2.0, 3000))
    assert tree.min == 1.0
    tree.set(np.array([0]), np.array([5.0]))  # the least one goes up: the next is the min
    assert tree.min == np.linspace(1.0, 2.0, 3000)[1]
    tree.set(np.array([7, 9]), np.array([0.0, 0.5]))  # zero stays out; a lower one comes in
    assert tree.min == 0.5
    tree.set(np.array([9, 9]), np.array([0.25, 3.0]))  # given twice: the value kept counts
    assert tree.min == min(tree.values[9], np.linspace(1.0, 2.0, 3000)[1])


@pytest.mark.parametrize("alpha", [0.6, 1.0])
def test_prioritized_frequencies_and_weights_in_a_wrapped_buffer(alpha):
    """A 3000-transition buffer (not a power of 2) written
    round more than once: sampled frequencies follow p**alpha over what it holds, and the
    weights are (N * P(i))**-beta over the largest possible."""
    rng = np.random.default_rng(4)
    buf = PrioritizedReplayBuffer(3000, SPECS, alpha=alpha, eps=0.0, seed=5)
    for start in range(0, 7000, 700):  # wraps twice
        buf.add(batch(start, 700))
    assert len(buf) == 3000 and buf.next_index == 1000
    td = rng.exponential(size=3000)
    buf.update_priorities(np.arange(3000), td)
    prob = td ** alpha / (td ** alpha).sum()
    counts = np.zeros(3000)
    for _ in range(100):
        s = buf.sample(4096, beta=0.7)
        # Rows stay with their index; the batch is not in index (stratum) order.
        assert np.array_equal(s["rewards"], buf.columns["rewards"][s["batch_indexes"]])
        assert (np.diff(s["batch_indexes"]) < 0).any()
        counts += np.bincount(s["batch_indexes"], minlength=3000)
    # Pooled in 30 groups of 100 items: each group's share within 4 standard deviations.
    groups = np.argsort(prob).reshape(30, 100)
    n = counts.sum()
    got, want = counts[groups].sum(1) / n, prob[groups].sum(1)
    assert np.all(np.abs(got - want) < 4 * np.sqrt(want * (1 - want) / n) + 1e-4)
    # The newest rows (700 before next_index) are where the last add put them.
    assert buf.columns["rewards"][999] == 6999
    s = buf.sample(512, beta=0.7)
    want_w = (3000 * prob[s["batch_indexes"]]) ** -0.7 / (3000 * prob.min()) ** -0.7
    np.testing.assert_allclose(s["weights"], want_w, rtol=1e-5)
    assert s["weights"].max() <= 1.0


def test_prioritized_sampling_never_returns_a_zero_priority_or_unwritten_row():
    buf = PrioritizedReplayBuffer(5000, SPECS, alpha=1.0, eps=0.0, seed=6)
    buf.add(batch(0, 1500))  # 1500 of 5000 written: the rest stays out
    buf.update_priorities(np.arange(0, 1500, 2), np.zeros(750))  # every even one: never
    for _ in range(20):
        idx = buf.sample(1024)["batch_indexes"]
        assert idx.max() < 1500 and (idx % 2 == 1).all()
    buf.update_priorities(np.arange(1, 1500, 2), np.zeros(750))
    with pytest.raises(ValueError, match="every priority is 0"):
        buf.sample(8)


def _chi_square(counts: np.ndarray, expected: np.ndarray) -> float:
    return float(((counts - expected) ** 2 / expected).sum())


@pytest.mark.parametrize("capacity, n", [(40000, 1000), (700, 1000), (3, 1000), (700, 7)])
def test_sampled_counts_pass_a_chi_square_test_against_the_priorities(capacity, n):
    """Counts over contiguous groups of leaves (so a drift toward one end shows) against
    p_i / sum p: under the 99.99th percentile of chi-square; leaves of priority 0 never come.
    40000 leaves go through find's prefix search and 2 levels of descent, 700 and 3 through
    the prefix search alone (fewer leaves than its level); batches of 7 make a slip in the
    slices (one of n) show."""
    rng = np.random.default_rng(11)
    buf = PrioritizedReplayBuffer(capacity, SPECS, alpha=1.0, eps=0.0, seed=12)
    buf.add(batch(0, capacity))
    pri = rng.lognormal(0.0, 1.5, capacity) * (rng.random(capacity) < 0.8)
    pri[0] = 1.0  # at least one drawable
    buf.update_priorities(np.arange(capacity), pri)
    counts = np.zeros(capacity)
    for _ in range(100_000 // n):
        counts += np.bincount(buf.sample(n)["batch_indexes"], minlength=capacity)
    assert counts[pri == 0].sum() == 0
    groups = min(capacity, 50)
    edges = np.linspace(0, capacity, groups + 1).astype(int)
    got = np.add.reduceat(counts, edges[:-1])
    want = np.add.reduceat(pri, edges[:-1]) / pri.sum() * counts.sum()
    keep = want > 0
    # chi-square with 49 degrees of freedom: 99.99th percentile about 97 (stratified
    # sampling varies less than independent draws, so the statistic sits lower still)
    limit = {50: 97.0, 3: 18.5}[groups]
    assert _chi_square(got[keep], want[keep]) < limit


def test_sum_tree_stays_exact_under_many_overwrites():
    """Rounds of updates (duplicates, zeros, values far apart in scale): the total matches
    the exact sum of the leaves, the minimum is the least positive leaf, and find returns
    exactly the leaf the prefix sums of the leaves say, after every round."""
    import math

    rng = np.random.default_rng(13)
    n = 40000  # over find's search level: two levels of descent
    tree = SumTree(n)
    assert tree.depth > tree.cut
    values = np.zeros(n)
    for r in range(60):
        idx = rng.integers(0, n, 5000 if r == 0 else 256)
        new = rng.lognormal(0.0, 4.0, len(idx)) * (rng.random(len(idx)) < 0.9)
        tree.set(idx, new)
        values[idx] = tree.values[idx]  # of an index given twice, the value kept
        assert np.array_equal(tree.values, values)
        assert tree.total == pytest.approx(math.fsum(values), rel=1e-12)
        assert tree.min == values[values > 0].min()
    bounds = np.cumsum(values)
    mass = np.sort(rng.random(5000)) * bounds[-1] * (1 - 1e-12)
    want = np.searchsorted(bounds, mass, side="right")
    got = tree.find(mass)
    # equal up to masses within rounding of a leaf's edge
    off = got != want
    assert off.sum() <= 2 and np.all(np.abs(bounds[np.minimum(got, want)][off] - mass[off])
                                     <= 1e-9 * bounds[-1])


@pytest.mark.parametrize("capacity", [1, 2, 3, 17])
def test_tiny_prioritized_buffers_sample_only_what_they_hold(capacity):
    buf = PrioritizedReplayBuffer(capacity, SPECS, alpha=1.0, eps=0.0, seed=14)
    buf.add(batch(0, 1))
    s = buf.sample(64)
    assert set(s["batch_indexes"].tolist()) == {0} and np.all(s["weights"] == 1.0)
    buf.add(batch(1, capacity + 2))  # wraps
    pri = np.arange(1, capacity + 1, dtype=np.float64)
    buf.update_priorities(np.arange(capacity), pri)
    counts = np.bincount(buf.sample(4000 * capacity)["batch_indexes"], minlength=capacity)
    np.testing.assert_allclose(counts / counts.sum(), pri / pri.sum(), atol=0.01)


def test_prioritized_state_round_trip_gives_the_same_samples():
    rng = np.random.default_rng(15)
    buf = PrioritizedReplayBuffer(1500, SPECS, alpha=0.6, eps=1e-6, seed=16)
    for start in range(0, 2500, 500):  # wraps
        buf.add(batch(start, 500))
    buf.update_priorities(rng.integers(0, 1500, 900), rng.exponential(size=900) * 3)
    state = buf.get_state()
    back = PrioritizedReplayBuffer(1500, SPECS, alpha=0.6, eps=1e-6, seed=0)
    back.set_state(state)
    assert np.array_equal(back.tree.values, buf.tree.values)
    assert back.tree.total == buf.tree.total and back.tree.min == buf.tree.min
    assert (back.max_priority, back.next_index, len(back)) == \
        (buf.max_priority, buf.next_index, len(buf))
    back.rng.bit_generator.state = buf.rng.bit_generator.state
    a, b = buf.sample(512, beta=0.5), back.sample(512, beta=0.5)
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])


def test_gather_keeps_multi_dimensional_rows_whole():
    specs = transition_columns(gym.spaces.Box(-1, 1, (2, 3)), gym.spaces.Box(-1, 1, (2,)))
    buf = ReplayBuffer(50, specs, seed=17)
    ids = np.arange(50, dtype=np.float32)
    buf.add({"obs": np.broadcast_to(ids[:, None, None], (50, 2, 3)), "rewards": ids,
             "actions": np.stack([ids, -ids], 1), "next_obs": np.zeros((50, 2, 3), np.float32),
             "terminateds": np.zeros(50, bool), "discounts": np.ones(50, np.float32)})
    s = buf.sample(200)
    assert s["obs"].shape == (200, 2, 3) and s["actions"].shape == (200, 2)
    assert (s["obs"] == s["rewards"][:, None, None]).all()
    assert (s["actions"][:, 1] == -s["rewards"]).all()
    assert s["obs"].flags.c_contiguous and s["obs"].flags.writeable


# --- n-step ---

def episode_streams(rng: np.random.Generator, num_envs: int, length: int):
    """Per env: a list of steps (obs id, action, reward, terminated, truncated, next obs id,
    index in episode), obs ids unique over the whole run."""
    next_id = iter(range(10**6))
    streams = []
    for _ in range(num_envs):
        steps, obs, t = [], float(next(next_id)), 0
        for _ in range(length):
            end = rng.random()
            term, trunc = end < 0.06, 0.06 <= end < 0.1
            nxt = float(next(next_id))
            steps.append((obs, int(rng.integers(2)), float(rng.normal()), term, trunc, nxt, t))
            t = 0 if term or trunc else t + 1
            obs = float(next(next_id)) if term or trunc else nxt
        streams.append(steps)
    return streams


def fragments_of(streams, cuts):
    """The streams cut into time-major fragments at rows ``cuts``, as an env runner ships
    them (next_obs of the last row, final observations of truncations before it)."""
    out = []
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        rows = [[s[t] for s in streams] for t in range(lo, hi)]
        f = {"obs": np.array([[[r[0]] for r in row] for row in rows], np.float32),
             "actions": np.array([[r[1] for r in row] for row in rows]),
             "rewards": np.array([[r[2] for r in row] for row in rows], np.float32),
             "terminateds": np.array([[r[3] for r in row] for row in rows]),
             "truncateds": np.array([[r[4] for r in row] for row in rows]),
             "t": np.array([[r[6] for r in row] for row in rows]),
             "mask": np.ones((hi - lo, len(streams)), bool),
             "next_obs": np.array([[r[5]] for r in rows[-1]], np.float32), "worker_index": 1}
        trunc = [(t, b, rows[t][b][5]) for t in range(hi - lo - 1) for b in range(len(streams))
                 if rows[t][b][4] and not rows[t][b][3]]
        f["trunc_index"] = np.array([(t, b) for t, b, _ in trunc], np.int64).reshape(-1, 2)
        f["trunc_obs"] = np.array([[o] for _, _, o in trunc], np.float32).reshape(-1, 1)
        out.append(f)
    return out


def brute_force(stream, n: int, gamma: float):
    """Each step's n-step transition by its definition: {obs id: (return, next obs id,
    terminated, discount)}; steps whose window runs past the stream are left out."""
    out = {}
    for i, (obs, _, _, _, _, _, _) in enumerate(stream):
        ret, k = 0.0, 0
        for m in range(n):
            if i + m >= len(stream):
                break
            _, _, r, term, trunc, nxt, _ = stream[i + m]
            ret += gamma ** m * r
            k = m + 1
            if term or trunc:
                break
        last = stream[i + k - 1]
        if k < n and not (last[3] or last[4]):
            continue  # incomplete at the end of the data
        term = last[3]
        out[obs] = (ret, None if term else last[5], term, 0.0 if term else gamma ** k)
    return out


@pytest.mark.parametrize("n", [1, 3, 5])
def test_nstep_matches_brute_force_across_fragments(n):
    rng = np.random.default_rng(n)
    gamma = 0.9
    streams = episode_streams(rng, num_envs=3, length=300)
    cuts = [0, 7, 8, 30, 31, 33, 100, 197, 200, 260, 300]  # fragments of 1 to 97 rows
    builder = NStepBuilder(n, gamma)
    got = {}
    for f in fragments_of(streams, cuts):
        tr = builder.add_fragment(f)
        for i in range(len(tr["rewards"])):
            got[float(tr["obs"][i, 0])] = (float(tr["rewards"][i]), float(tr["next_obs"][i, 0]),
                                           bool(tr["terminateds"][i]), float(tr["discounts"][i]))
    want = {}
    for s in streams:
        want.update(brute_force(s, n, gamma))
    assert set(got) == set(want)
    assert builder.num_pending == sum(len(s) for s in streams) - len(want)
    for obs, (ret, nxt, term, disc) in want.items():
        g = got[obs]
        assert g[0] == pytest.approx(ret, rel=1e-5, abs=1e-5)
        assert g[2] == term and g[3] == pytest.approx(disc)
        if not term:
            assert g[1] == nxt


def test_nstep_drops_a_carry_whose_episode_did_not_go_on():
    builder = NStepBuilder(3, 0.5)
    f = fragments_of([[(0.0, 0, 1.0, False, False, 1.0, 0), (1.0, 0, 1.0, False, False, 2.0, 1)]],
                     [0, 2])[0]
    assert len(builder.add_fragment(f)["rewards"]) == 0  # both wait for a third step
    g = fragments_of([[(10.0, 0, 1.0, True, False, 11.0, 0)]], [0, 1])[0]  # a new episode (t=0)
    out = builder.add_fragment(g)
    assert out["obs"][:, 0].tolist() == [10.0]
    assert builder.counters["num_nstep_steps_dropped"] == 2 and builder.num_pending == 0


def test_nstep_cut_ends_every_window_at_the_fragment_end():
    # a multi-agent part: columns are agents (right-aligned, padding first); nothing carried
    T, n, gamma = 4, 3, 0.5
    mask = np.array([[False, True], [True, True], [True, True], [True, True]])
    fragment = {"obs": np.arange(T * 2, dtype=np.float32).reshape(T, 2, 1),
                "actions": np.zeros((T, 2), np.int64), "rewards": np.ones((T, 2), np.float32),
                "terminateds": np.zeros((T, 2), bool), "truncateds": np.zeros((T, 2), bool),
                "mask": mask, "next_obs": np.array([[100.0], [200.0]], np.float32),
                "trunc_index": np.zeros((0, 2), np.int64),
                "trunc_obs": np.zeros((0, 1), np.float32)}
    builder = NStepBuilder(n, gamma)
    out = builder.add_fragment(fragment, cut=True)
    assert len(out["rewards"]) == 3 + 4 and builder.num_pending == 0
    # agent 1's last step: a window of one, bootstrapped from its next observation
    assert out["next_obs"][-1, 0] == 200.0 and out["discounts"][-1] == pytest.approx(gamma)
    assert out["rewards"][-1] == pytest.approx(1.0)
    assert out["discounts"][3] == pytest.approx(gamma ** 3)  # agent 1's first: a full window
    without = NStepBuilder(n, gamma).add_fragment(fragment)
    assert len(without["rewards"]) == 1 + 2  # windows past the end wait for the next fragment
