"""Distributional Q-learning's math (C51, Bellemare et al. 2017): the fixed support of
returns, Q as the expectation of a categorical distribution over it, and the projection of
a Bellman-updated distribution back onto the support. DQN's ``num_atoms`` > 1."""

from __future__ import annotations

import torch


def support(num_atoms: int, v_min: float, v_max: float,
            device: torch.device | str = "cpu") -> torch.Tensor:
    """The atoms ``z_i = v_min + i (v_max - v_min) / (num_atoms - 1)``, ``[num_atoms]``."""
    return torch.linspace(v_min, v_max, num_atoms, device=device)


def expected_q(logits: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """Q ``[..., A]`` from the logits ``[..., A, num_atoms]``: sum_i softmax(logits)_i z_i."""
    return (logits.softmax(-1) * z).sum(-1)


def project(probs: torch.Tensor, rewards: torch.Tensor, discounts: torch.Tensor,
            z: torch.Tensor) -> torch.Tensor:
    """The categorical projection of ``r + discount * Z'`` onto the support ``z``.

    ``probs`` ``[B, N]``: the next state's distribution (of the action chosen there) on
    ``z``; ``rewards``, ``discounts`` ``[B]``: the n-step reward and gamma**n (0 after a
    termination, which leaves all the mass on the atoms around r). Each shifted atom
    ``Tz_j``, clipped to ``[v_min, v_max]``, splits its probability between the two atoms
    around it in proportion to its closeness (all of it to one atom when it lands on it).
    Returns the target distribution ``[B, N]`` (rows sum to 1)."""
    n = z.numel()
    v_min, v_max = z[0], z[-1]
    delta = (v_max - v_min) / (n - 1)
    tz = (rewards.unsqueeze(-1) + discounts.unsqueeze(-1) * z).clamp(v_min, v_max)
    b = (tz - v_min) / delta  # fractional index of each shifted atom, in [0, n - 1]
    lower = b.floor().clamp(0, n - 1)
    upper = b.ceil().clamp(0, n - 1)
    # On an atom (lower == upper) the lower one takes it all.
    w_lower = probs * (upper - b + (lower == upper).to(probs.dtype))
    w_upper = probs * (b - lower)
    target = torch.zeros_like(probs)
    target.scatter_add_(-1, lower.long(), w_lower)
    target.scatter_add_(-1, upper.long(), w_upper)
    return target


def cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``-sum_i target_i log softmax(logits)_i`` per row: C51's loss and its priorities."""
    return -(target * logits.log_softmax(-1)).sum(-1)
