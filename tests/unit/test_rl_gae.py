"""GAE against slow references written from the definitions: explicit sums of
(gamma*lambda)^k TD errors, and the lambda-return as a weighted mix of n-step returns."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rlmesh.rl import compute_gae


def next_value(t, b, values, bootstrap, term, trunc):
    """V(s_{t+1}) as the definitions say: 0 after a terminal state, the bootstrap value
    after a truncation or at the end of the data, else the next step's value."""
    T = len(values)
    if term[t][b]:
        return 0.0
    if trunc[t][b] or t == T - 1:
        return bootstrap[t][b]
    return values[t + 1][b]


def episode_end(t, b, term, trunc):
    """The last step of the segment that step t belongs to, within the fragment."""
    T = len(term)
    k = t
    while not (term[k][b] or trunc[k][b]) and k < T - 1:
        k += 1
    return k


def reference_gae(rewards, values, bootstrap, term, trunc, gamma, lam):
    """A_t = sum_{l=0}^{end-t} (gamma*lam)^l delta_{t+l}, per env and per step."""
    T, B = len(rewards), len(rewards[0])
    adv = [[0.0] * B for _ in range(T)]
    for b in range(B):
        for t in range(T):
            end = episode_end(t, b, term, trunc)
            total = 0.0
            for k in range(t, end + 1):
                delta = rewards[k][b] + gamma * next_value(k, b, values, bootstrap, term, trunc) - values[k][b]
                total += (gamma * lam) ** (k - t) * delta
            adv[t][b] = total
    return adv


def reference_lambda_return(rewards, values, bootstrap, term, trunc, gamma, lam):
    """G^lambda_t = (1-lam) sum_{n<N} lam^(n-1) G^(n) + lam^(N-1) G^(N), N steps to the end."""
    T, B = len(rewards), len(rewards[0])
    out = [[0.0] * B for _ in range(T)]
    for b in range(B):
        for t in range(T):
            N = episode_end(t, b, term, trunc) - t + 1

            def n_step(n):
                ret = sum(gamma**k * rewards[t + k][b] for k in range(n))
                return ret + gamma**n * next_value(t + n - 1, b, values, bootstrap, term, trunc)

            g = sum((1 - lam) * lam ** (n - 1) * n_step(n) for n in range(1, N))
            out[t][b] = g + (lam ** (N - 1)) * n_step(N)
    return out


def random_fragment(rng, T, B, p_term=0.08, p_trunc=0.08):
    rewards = rng.normal(size=(T, B))
    values = rng.normal(size=(T, B))
    bootstrap = rng.normal(size=(T, B))
    term = rng.random((T, B)) < p_term
    trunc = rng.random((T, B)) < p_trunc
    term[2, 0], trunc[5, 1] = True, True  # both kinds of ending mid-fragment, every time
    term[4, 2] = trunc[4, 2] = True  # both flags at once: counts as terminated
    return rewards, values, bootstrap, term, trunc


@pytest.mark.parametrize("gamma,lam", [(0.99, 0.95), (0.9, 1.0), (0.5, 0.0), (1.0, 0.7), (0.97, 0.5)])
def test_matches_reference_on_random_episodes(gamma, lam):
    rng = np.random.default_rng(int(gamma * 1000 + lam * 10))
    for T, B in [(1, 3), (12, 4), (40, 5)]:
        fragment = tuple(x[:T] for x in random_fragment(rng, max(T, 6), B))
        adv, targets = compute_gae(*(torch.as_tensor(x) for x in fragment), gamma=gamma, lambda_=lam)
        want = np.array(reference_gae(*(x.tolist() for x in fragment), gamma, lam))
        np.testing.assert_allclose(adv.numpy(), want, rtol=1e-10, atol=1e-10)
        want_targets = np.array(reference_lambda_return(*(x.tolist() for x in fragment), gamma, lam))
        np.testing.assert_allclose(targets.numpy(), want_targets, rtol=1e-10, atol=1e-10)


def test_lambda_one_is_the_bootstrapped_monte_carlo_return():
    rng = np.random.default_rng(1)
    rewards, values, bootstrap, term, trunc = random_fragment(rng, 20, 4)
    gamma = 0.9
    _, targets = compute_gae(*(torch.as_tensor(x) for x in (rewards, values, bootstrap, term, trunc)),
                             gamma=gamma, lambda_=1.0)
    for b in range(4):
        for t in range(20):
            end = episode_end(t, b, term, trunc)
            ret = sum(gamma ** (k - t) * rewards[k, b] for k in range(t, end + 1))
            tail = 0.0 if term[end, b] else bootstrap[end, b]
            assert targets[t, b].item() == pytest.approx(ret + gamma ** (end - t + 1) * tail, abs=1e-10)


def test_lambda_zero_is_the_td_error():
    rng = np.random.default_rng(2)
    frag = random_fragment(rng, 15, 3)
    rewards, values, bootstrap, term, trunc = frag
    adv, _ = compute_gae(*(torch.as_tensor(x) for x in frag), gamma=0.8, lambda_=0.0)
    for b in range(3):
        for t in range(15):
            v_next = next_value(t, b, values, bootstrap, term, trunc)
            assert adv[t, b].item() == pytest.approx(rewards[t, b] + 0.8 * v_next - values[t, b], abs=1e-12)


def test_hand_computed_case():
    # env 0 terminates at t=1; env 1 is truncated at t=0 (true next obs worth 4).
    # gamma = lambda = 0.5, so gamma*lambda = 0.25.
    rewards = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    values = torch.tensor([[0.0, 1.0], [0.0, 2.0], [0.0, 3.0]])
    bootstrap = torch.tensor([[9.0, 4.0], [9.0, 9.0], [2.0, 10.0]])  # the 9s are ignored
    term = torch.tensor([[False, False], [True, False], [False, False]])
    trunc = torch.tensor([[False, True], [False, False], [False, False]])
    adv, targets = compute_gae(rewards, values, bootstrap, term, trunc, gamma=0.5, lambda_=0.5)
    # env 0: deltas 1, 1 (no bootstrap after the terminal state), 1 + 0.5*2 = 2
    #        A2 = 2, A1 = 1 (cut), A0 = 1 + 0.25*1 = 1.25
    # env 1: deltas 0.5*4 - 1 = 1, 0.5*3 - 2 = -0.5, 0.5*10 - 3 = 2
    #        A2 = 2, A1 = -0.5 + 0.25*2 = 0, A0 = 1 (cut)
    torch.testing.assert_close(adv, torch.tensor([[1.25, 1.0], [1.0, 0.0], [2.0, 2.0]]))
    torch.testing.assert_close(targets, torch.tensor([[1.25, 2.0], [1.0, 2.0], [2.0, 5.0]]))


def test_ignored_bootstrap_entries_may_be_nan():
    rng = np.random.default_rng(3)
    rewards, values, bootstrap, term, trunc = random_fragment(rng, 10, 4)
    needed = trunc & ~term
    needed[-1] = True
    holey = np.where(needed, bootstrap, np.nan)
    args = [torch.as_tensor(x) for x in (rewards, values, holey, term, trunc)]
    adv, targets = compute_gae(*args, gamma=0.99, lambda_=0.95)
    want, _ = compute_gae(*(torch.as_tensor(x) for x in (rewards, values, bootstrap, term, trunc)),
                          gamma=0.99, lambda_=0.95)
    assert torch.isfinite(adv).all() and torch.isfinite(targets).all()
    torch.testing.assert_close(adv, want)


def test_float32_values_with_float_flags_and_float64_rewards():
    rng = np.random.default_rng(4)
    rewards, values, bootstrap, term, trunc = random_fragment(rng, 8, 3)
    adv, targets = compute_gae(
        torch.as_tensor(rewards), torch.as_tensor(values, dtype=torch.float32),
        torch.as_tensor(bootstrap, dtype=torch.float32),
        torch.as_tensor(term, dtype=torch.float32), torch.as_tensor(trunc, dtype=torch.uint8),
        gamma=0.99, lambda_=0.95)
    assert adv.dtype == targets.dtype == torch.float32
    want = reference_gae(*(x.tolist() for x in (rewards, values.astype(np.float32),
                                                 bootstrap.astype(np.float32), term, trunc)), 0.99, 0.95)
    np.testing.assert_allclose(adv.numpy(), np.array(want), rtol=1e-5, atol=1e-5)


def test_no_episode_end_discounts_over_the_whole_fragment():
    T = 5
    ones = torch.ones(T, 1, dtype=torch.float64)
    zeros = torch.zeros(T, 1, dtype=torch.float64)
    no = torch.zeros(T, 1, dtype=torch.bool)
    _, targets = compute_gae(ones, zeros, zeros, no, no, gamma=0.9, lambda_=1.0)
    want = [sum(0.9**k for k in range(T - t)) for t in range(T)]
    assert targets[:, 0].tolist() == pytest.approx(want)
    assert math.isclose(targets[0, 0].item(), (1 - 0.9**5) / 0.1)


def test_shape_mismatch_names_the_argument():
    x = torch.zeros(4, 2)
    with pytest.raises(ValueError, match="truncateds has shape"):
        compute_gae(x, x, x, x.bool(), torch.zeros(4, 3, dtype=torch.bool), gamma=0.9, lambda_=0.9)
