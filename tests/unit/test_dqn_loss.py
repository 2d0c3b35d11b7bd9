"""DQN's loss against the textbook targets written out in torch (double Q, dueling, weights,
Huber), and which rows its backward runs through."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from rlmesh.algorithms.dqn import DQNConfig, DQNTorchPolicy

OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
ACT = gym.spaces.Discrete(3)
B = 16


def policy(double_q: bool, dueling: bool, noisy: bool = False) -> DQNTorchPolicy:
    torch.manual_seed(0)
    cfg = DQNConfig().environment("CartPole-v1").update_from_dict({
        "double_q": double_q, "dueling": dueling, "noisy": noisy, "hiddens": [8],
        "model": {"fcnet_hiddens": [16, 16]}})
    pol = DQNTorchPolicy(OBS, ACT, cfg).for_learning()
    with torch.no_grad():  # a target network that differs from the online one
        for p in pol.target_model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return pol


def minibatch(seed: int = 1) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {"obs": torch.randn(B, 4, generator=gen), "next_obs": torch.randn(B, 4, generator=gen),
            "actions": torch.randint(0, 3, (B,), generator=gen),
            "rewards": torch.randn(B, generator=gen),
            "discounts": torch.where(torch.rand(B, generator=gen) < 0.2, 0.0, 0.99 ** 3),
            "weights": torch.rand(B, generator=gen) + 0.5}


@pytest.mark.parametrize("double_q,dueling", [(True, True), (True, False), (False, True)])
def test_loss_and_td_errors_are_the_textbook_targets(double_q, dueling):
    pol, mb = policy(double_q, dueling), minibatch()
    loss, stats = pol.loss(mb)
    online, target = pol.model.q_values, pol.target_model.q_values
    with torch.no_grad():
        q_next = target(mb["next_obs"])
        pick = (online if double_q else target)(mb["next_obs"]).argmax(-1)
        y = mb["rewards"] + mb["discounts"] * q_next[torch.arange(B), pick]
    q = online(mb["obs"])[torch.arange(B), mb["actions"]]
    want = (mb["weights"] * F.huber_loss(q, y, reduction="none")).mean()
    torch.testing.assert_close(loss, want)
    torch.testing.assert_close(stats["td_error"], (q - y).detach())
    grads = torch.autograd.grad(loss, list(pol.model.parameters()))
    want_grads = torch.autograd.grad(want, list(pol.model.parameters()))
    for g, w in zip(grads, want_grads):
        torch.testing.assert_close(g, w)


def rows_seen(pol: DQNTorchPolicy) -> list[tuple[int, bool]]:
    """(rows, recorded for autograd) of every pass through the online trunk in one loss."""
    seen: list[tuple[int, bool]] = []
    first = next(m for m in pol.model.trunk.modules() if isinstance(m, torch.nn.Linear))
    first.register_forward_hook(lambda m, args, out: seen.append((len(args[0]), out.requires_grad)))
    pol.loss(minibatch())
    return seen


def test_double_q_backward_runs_through_the_obs_rows_only():
    # The online Q(next_obs) only picks actions: a pass of its own without autograd, so the
    # backward (most of a step) is not paid on its rows too.
    assert sorted(rows_seen(policy(True, True))) == [(B, False), (B, True)]


def test_noisy_double_q_keeps_one_pass_for_one_noise_draw():
    assert rows_seen(policy(True, True, noisy=True)) == [(2 * B, True)]
