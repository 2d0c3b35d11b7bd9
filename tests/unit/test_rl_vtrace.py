"""V-trace against a slow loop written from the IMPALA paper's definition (with episode
ends and truncations inside fragments), and its on-policy case: n-step returns."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlmesh.rl import compute_gae
from rlmesh.rl.vtrace import vtrace


def reference(mu, pi, r, v, boot, term, trunc, gamma, rho_bar, pg_bar, c_bar, lam=1.0):
    """v_s = V(x_s) + sum_{t>=s} gamma^(t-s) (prod_{i=s}^{t-1} c_i) delta_t over the steps
    of s's episode left in the fragment; one env column at a time, in float64."""
    T = len(r)
    ratio = np.exp(pi - mu)
    clip = (lambda x, bar: x if bar is None else np.minimum(x, bar))
    rho, c, rho_pg = clip(ratio, rho_bar), clip(ratio, c_bar), clip(ratio, pg_bar)
    done = term | trunc

    def v_next(t):  # the value after step t where the data or the episode stops
        if term[t]:
            return 0.0
        if trunc[t] or t == T - 1:
            return boot[t]
        return v[t + 1]

    delta = [rho[t] * (r[t] + gamma * v_next(t) - v[t]) for t in range(T)]
    vs = np.zeros(T)
    for s in range(T):
        total, weight = 0.0, 1.0
        for t in range(s, T):
            total += weight * delta[t]
            if done[t]:
                break
            weight *= gamma * lam * c[t]
        vs[s] = v[s] + total
    adv = np.zeros(T)
    for s in range(T):
        nxt = vs[s + 1] if (s + 1 < T and not done[s]) else v_next(s)
        adv[s] = rho_pg[s] * (r[s] + gamma * nxt - v[s])
    return vs, adv


def fragment(T=9, B=5, seed=0, off_policy=True):
    g = np.random.default_rng(seed)
    mu = np.log(g.uniform(0.1, 1.0, (T, B)))
    pi = mu + (g.normal(0, 0.7, (T, B)) if off_policy else 0.0)
    r, v, boot = g.normal(size=(T, B)), g.normal(size=(T, B)), g.normal(size=(T, B))
    term = g.random((T, B)) < 0.15
    trunc = (g.random((T, B)) < 0.15) & ~term
    trunc[T - 1, 0] = True  # a truncation on the last row
    term[3, 1] = True
    return mu, pi, r, v, boot, term, trunc


@pytest.mark.parametrize("thresholds", [(1.0, 1.0, 1.0), (2.0, 0.5, 1.0), (None, None, None)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_the_papers_definition(thresholds, seed):
    rho_bar, pg_bar, c_bar = thresholds
    mu, pi, r, v, boot, term, trunc = fragment(seed=seed)
    gamma = 0.95
    vs, adv = vtrace(*map(torch.as_tensor, (mu, pi, r, v, boot, term, trunc)), gamma,
                     clip_rho_threshold=rho_bar, clip_pg_rho_threshold=pg_bar,
                     clip_c_threshold=c_bar)
    for b in range(r.shape[1]):
        ref_vs, ref_adv = reference(mu[:, b], pi[:, b], r[:, b], v[:, b], boot[:, b],
                                    term[:, b], trunc[:, b], gamma, rho_bar, pg_bar, c_bar)
        np.testing.assert_allclose(vs[:, b].numpy(), ref_vs, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(adv[:, b].numpy(), ref_adv, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("lam", [0.0, 0.8])
def test_lambda_scales_the_traces_as_the_papers_remark(lam):
    """c_i = lambda min(c_bar, rho_i) (the IMPALA paper's remark 2); on-policy vs - V is then
    GAE's advantage at that lambda and vs TD(lambda)'s return."""
    mu, pi, r, v, boot, term, trunc = fragment(seed=6)
    vs, adv = vtrace(*map(torch.as_tensor, (mu, pi, r, v, boot, term, trunc)), 0.95,
                     lambda_=lam)
    for b in range(r.shape[1]):
        ref_vs, ref_adv = reference(mu[:, b], pi[:, b], r[:, b], v[:, b], boot[:, b],
                                    term[:, b], trunc[:, b], 0.95, 1.0, 1.0, 1.0, lam)
        np.testing.assert_allclose(vs[:, b].numpy(), ref_vs, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(adv[:, b].numpy(), ref_adv, rtol=1e-10, atol=1e-10)
    args = [torch.as_tensor(x) for x in (r, v, boot, term, trunc)]
    on, _ = vtrace(torch.as_tensor(mu), torch.as_tensor(mu), *args, 0.95, lambda_=lam)
    gae_adv, targets = compute_gae(*args, 0.95, lam)
    torch.testing.assert_close(on, targets)
    torch.testing.assert_close(on - torch.as_tensor(v), gae_adv)


@pytest.mark.parametrize("pg_bar", [1.0, 0.5])
def test_without_pg_rho_the_advantages_are_the_same_td_errors_unweighted(pg_bar):
    """pg_rho=False (APPO's behaviour anchor, whose ratio pi/mu is the weight already):
    r + gamma vs_next - V, the same value targets; times the clipped rho they are the
    paper's advantages again."""
    mu, pi, r, v, boot, term, trunc = fragment(seed=5)
    args = [torch.as_tensor(x) for x in (mu, pi, r, v, boot, term, trunc)]
    vs, adv = vtrace(*args, 0.95, clip_pg_rho_threshold=pg_bar)
    vs_plain, plain = vtrace(*args, 0.95, clip_pg_rho_threshold=pg_bar, pg_rho=False)
    torch.testing.assert_close(vs_plain, vs)
    rho = torch.exp(torch.as_tensor(pi - mu)).clamp(max=pg_bar)
    assert not torch.allclose(plain, adv)
    torch.testing.assert_close(plain * rho, adv)


def test_on_policy_it_is_n_step_returns():
    mu, _, r, v, boot, term, trunc = fragment(seed=4, off_policy=False)
    term[:, -1] = trunc[:, -1] = False  # one column where the episode runs past the fragment
    args = [torch.as_tensor(x) for x in (r, v, boot, term, trunc)]
    vs, adv = vtrace(torch.as_tensor(mu), torch.as_tensor(mu), *args, 0.9)
    gae_adv, targets = compute_gae(*args, 0.9, 1.0)
    torch.testing.assert_close(vs, targets)
    torch.testing.assert_close(adv, gae_adv)
    # By hand for one column with no episode end: sum of discounted rewards + bootstrap.
    T = r.shape[0]
    col = r.shape[1] - 1
    n_step = sum(0.9 ** k * r[k, col] for k in range(T)) + 0.9 ** T * boot[T - 1, col]
    assert vs[0, col].item() == pytest.approx(n_step)


def test_ignored_bootstrap_entries_cannot_leak_nan():
    mu, pi, r, v, boot, term, trunc = fragment(seed=5)
    boot_nan = boot.copy()
    read = trunc.copy()
    read[-1] = True
    boot_nan[~read] = np.nan
    a = vtrace(*map(torch.as_tensor, (mu, pi, r, v, boot, term, trunc)), 0.99)
    b = vtrace(*map(torch.as_tensor, (mu, pi, r, v, boot_nan, term, trunc)), 0.99)
    torch.testing.assert_close(a, b)


def test_shapes_are_checked():
    x = torch.zeros(4, 2)
    with pytest.raises(ValueError, match="vtrace: rewards has shape"):
        vtrace(x, x, torch.zeros(4, 3), x, x, x.bool(), x.bool(), 0.9)
