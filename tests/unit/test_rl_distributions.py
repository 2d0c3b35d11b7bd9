"""Action distributions against torch.distributions and closed forms, sample statistics,
and the change of variables of the squashed Gaussian checked numerically."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import distributions as D

from rlmesh.rl import Categorical, DiagGaussian, SquashedGaussian, clip_actions, distribution_for


@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(0)


def gaussian_inputs(batch, d, dtype=torch.float64):
    return torch.cat([torch.randn(batch, d, dtype=dtype) * 2, torch.rand(batch, d, dtype=dtype) * 3 - 2], -1)


# --- Categorical ---

def test_categorical_logp_entropy_kl_match_torch():
    logits, other = torch.randn(500, 6, dtype=torch.float64) * 3, torch.randn(500, 6, dtype=torch.float64)
    p, q = Categorical.from_inputs(logits), Categorical.from_inputs(other)
    ref_p, ref_q = D.Categorical(logits=logits), D.Categorical(logits=other)
    actions = torch.randint(0, 6, (500,))
    torch.testing.assert_close(p.logp(actions), ref_p.log_prob(actions))
    torch.testing.assert_close(p.entropy(), ref_p.entropy())
    torch.testing.assert_close(p.kl(q), D.kl_divergence(ref_p, ref_q))
    assert (p.kl(q) >= 0).all()
    torch.testing.assert_close(p.kl(p), torch.zeros(500, dtype=torch.float64))


def test_categorical_entropy_closed_form_uniform():
    assert Categorical.from_inputs(torch.zeros(3, 5)).entropy().tolist() == pytest.approx([math.log(5)] * 3)


def test_categorical_sample_frequencies_and_mode():
    logits = torch.log(torch.tensor([0.1, 0.6, 0.3]))
    dist = Categorical.from_inputs(logits.expand(4, 50_000, 3))
    samples = dist.sample()
    assert samples.shape == (4, 50_000) and samples.dtype == torch.int64
    freqs = torch.bincount(samples.flatten(), minlength=3).double() / samples.numel()
    torch.testing.assert_close(freqs, torch.tensor([0.1, 0.6, 0.3], dtype=torch.float64), atol=0.005, rtol=0)
    assert (dist.deterministic_sample() == 1).all()


def test_categorical_masked_action_gives_finite_entropy_and_is_never_sampled():
    logits = torch.tensor([[0.0, -math.inf, 1.0]])
    dist = Categorical.from_inputs(logits)
    assert torch.isfinite(dist.entropy()).all()
    assert (dist.kl(dist) == 0).all()
    assert not (Categorical.from_inputs(logits.expand(10_000, 3)).sample() == 1).any()


# --- DiagGaussian ---

def test_diag_gaussian_logp_entropy_kl_match_torch():
    x, y = gaussian_inputs(400, 3), gaussian_inputs(400, 3)
    p, q = DiagGaussian.from_inputs(x), DiagGaussian.from_inputs(y)
    ref_p = D.Independent(D.Normal(x[:, :3], x[:, 3:].exp()), 1)
    ref_q = D.Independent(D.Normal(y[:, :3], y[:, 3:].exp()), 1)
    actions = torch.randn(400, 3, dtype=torch.float64) * 4
    torch.testing.assert_close(p.logp(actions), ref_p.log_prob(actions))
    torch.testing.assert_close(p.kl(q), D.kl_divergence(ref_p, ref_q))
    # Closed form: sum over dims of log(sigma) + 0.5 log(2 pi e).
    torch.testing.assert_close(p.entropy(), (x[:, 3:] + 0.5 * math.log(2 * math.pi * math.e)).sum(-1))
    assert (p.kl(q) >= 0).all()
    torch.testing.assert_close(p.kl(p), torch.zeros(400, dtype=torch.float64))


def test_diag_gaussian_sample_statistics_and_mode():
    mean, log_std = torch.tensor([1.0, -2.0, 0.5]), torch.tensor([0.0, -1.0, 0.7])
    dist = DiagGaussian.from_inputs(torch.cat([mean, log_std]).expand(200_000, 6))
    samples = dist.sample()
    assert samples.shape == (200_000, 3) and not samples.requires_grad
    torch.testing.assert_close(samples.mean(0), mean, atol=0.02, rtol=0)
    torch.testing.assert_close(samples.std(0), log_std.exp(), atol=0.02, rtol=0)
    assert torch.equal(dist.deterministic_sample()[0], mean)


def test_diag_gaussian_gradients_reach_the_inputs():
    x = gaussian_inputs(8, 2).requires_grad_()
    dist = DiagGaussian.from_inputs(x)
    (dist.logp(torch.zeros(8, 2, dtype=torch.float64)).sum() + dist.entropy().sum()).backward()
    assert torch.isfinite(x.grad).all() and (x.grad != 0).any()


def test_clip_actions_clips_box_and_passes_discrete():
    box = gym.spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([1.0, 2.0], np.float32))
    out = clip_actions(np.array([[-3.0, 5.0], [0.5, 1.0]]), box)
    np.testing.assert_array_equal(out, [[-1.0, 2.0], [0.5, 1.0]])
    assert out.dtype == np.float32
    assert clip_actions(np.array([0, 3]), gym.spaces.Discrete(4)).tolist() == [0, 3]


# --- SquashedGaussian ---

LOW, HIGH = np.array([-2.0, 0.0, 3.0]), np.array([1.0, 0.5, 10.0])


def squashed(x):
    cls, _ = distribution_for(gym.spaces.Box(LOW, HIGH, dtype=np.float64), squash=True)
    return cls.from_inputs(x)


def test_squashed_samples_stay_within_bounds_and_mode_is_squashed_mean():
    x = gaussian_inputs(20_000, 3)
    dist = squashed(x)
    a = dist.sample()
    assert a.shape == (20_000, 3)
    assert (a >= torch.as_tensor(LOW)).all() and (a <= torch.as_tensor(HIGH)).all()
    mode = dist.deterministic_sample()
    want = torch.as_tensor(LOW) + (torch.tanh(x[:, :3]) + 1) * torch.as_tensor(HIGH - LOW) / 2
    torch.testing.assert_close(mode, want)


def test_squashed_logp_matches_torch_transformed_distribution():
    x = gaussian_inputs(300, 3).clamp(-3, 1.5)  # log_std within the clamp range
    dist = squashed(x)
    loc, scale = torch.as_tensor((HIGH + LOW) / 2), torch.as_tensor((HIGH - LOW) / 2)
    ref = D.Independent(D.TransformedDistribution(
        D.Normal(x[:, :3], x[:, 3:].exp()), [D.TanhTransform(), D.AffineTransform(loc, scale)]), 1)
    a = ref.sample()
    # Away from the bounds (where both approximate differently) the densities agree.
    inside = ((a - loc).abs() < 0.999 * scale).all(-1)
    torch.testing.assert_close(dist.logp(a)[inside], ref.log_prob(a)[inside])
    assert inside.sum() > 100


def test_squashed_density_integrates_to_one_by_change_of_variables():
    # 1-D, on a fine grid over [low, high]: the log-density, exponentiated, integrates to
    # 1, and equals p_u(atanh-map) * |du/da| with the derivative taken numerically.
    cls, _ = distribution_for(gym.spaces.Box(-1.5, 4.0, (1,), dtype=np.float64), squash=True)
    dist = cls.from_inputs(torch.tensor([[0.3, -0.4]], dtype=torch.float64))
    a = torch.linspace(-1.5, 4.0, 200_001, dtype=torch.float64)[1:-1].unsqueeze(-1)
    density = dist.logp(a).exp()
    assert torch.trapezoid(density, a[:, 0]).item() == pytest.approx(1.0, abs=1e-3)

    def inverse(a):
        return torch.atanh((a + 1.5) / 2.75 - 1.0)

    h = 1e-6
    a0 = torch.tensor([[-1.0], [0.2], [1.25], [3.5]], dtype=torch.float64)
    du_da = (inverse(a0 + h) - inverse(a0 - h)) / (2 * h)
    p_u = D.Normal(0.3, math.exp(-0.4)).log_prob(inverse(a0)).exp()
    torch.testing.assert_close(dist.logp(a0).exp(), (p_u * du_da)[:, 0], rtol=1e-6, atol=0)


def test_squashed_logp_is_finite_at_the_bounds():
    dist = squashed(gaussian_inputs(2, 3))
    edges = torch.as_tensor(np.stack([LOW, HIGH]))
    assert torch.isfinite(dist.logp(edges)).all()


def test_squashed_kl_is_that_of_the_gaussians_and_entropy_is_refused():
    x, y = gaussian_inputs(100, 3).clamp(-3, 1.5), gaussian_inputs(100, 3).clamp(-3, 1.5)
    p, q = squashed(x), squashed(y)
    torch.testing.assert_close(p.kl(q), DiagGaussian.from_inputs(x).kl(DiagGaussian.from_inputs(y)))
    assert (p.kl(q) >= 0).all() and torch.allclose(p.kl(p), torch.zeros(100, dtype=torch.float64))
    with pytest.raises(NotImplementedError, match="entropy_estimate"):
        p.entropy()


def test_squashed_entropy_estimate_approaches_the_true_entropy():
    # For a narrow Gaussian around the centre tanh is nearly linear: the entropy is close
    # to that of the Gaussian plus log of the scale (here 1-D, range [-1, 1], scale 1).
    x = torch.tensor([[0.0, -4.0]], dtype=torch.float64)
    est = SquashedGaussian.from_inputs(x.expand(50_000, 2)).entropy_estimate().mean()
    assert est.item() == pytest.approx(-4.0 + 0.5 * math.log(2 * math.pi * math.e), abs=0.01)


# --- distribution_for ---

def test_distribution_for_gives_class_and_input_size():
    assert distribution_for(gym.spaces.Discrete(7)) == (Categorical, 7)
    assert distribution_for(gym.spaces.Box(-1, 1, (4,))) == (DiagGaussian, 8)
    cls, n = distribution_for(gym.spaces.Box(-1, 1, (4,)), squash=True)
    assert issubclass(cls, SquashedGaussian) and n == 8


@pytest.mark.parametrize("space,match", [
    (gym.spaces.MultiDiscrete([2, 3], start=[1, 0]), "nonzero start"),
    (gym.spaces.Dict({"a": gym.spaces.Text(3)}), "Text"),
    (gym.spaces.Graph(gym.spaces.Discrete(2), None), "Graph"),
    (gym.spaces.Discrete(3, start=1), "starts at 1"),
])
def test_distribution_for_unsupported_space_names_it(space, match):
    with pytest.raises(ValueError, match=match) as info:
        distribution_for(space)
    assert str(space) in str(info.value)


def test_squash_needs_finite_bounds():
    with pytest.raises(ValueError, match="finite bounds"):
        distribution_for(gym.spaces.Box(-np.inf, np.inf, (2,)), squash=True)


def test_diag_gaussian_log_std_is_clipped_as_rllib_clips_it():
    """An entropy bonus on an env that clips actions can drive log_std up for ever; past
    RLlib's log_std_clip_param (20) it stops, and logp stays finite instead of NaN."""
    from rlmesh.rl.distributions import DiagGaussian

    inputs = torch.tensor([[0.0, 500.0], [0.0, -500.0]], requires_grad=True)
    dist = DiagGaussian(inputs)
    logp = dist.logp(torch.tensor([[1.0], [0.0]]))
    assert torch.isfinite(logp).all() and torch.isfinite(dist.entropy()).all()
    assert dist.log_std.abs().max().item() == DiagGaussian.LOG_STD_CLIP
    (logp.sum() + dist.entropy().sum()).backward()
    assert torch.isfinite(inputs.grad).all()
