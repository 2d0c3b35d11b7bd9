"""Generalized Advantage Estimation (Schulman et al., 2016) and discounted returns over
time-major fragments.

Where an episode ends inside a fragment, by termination or by truncation, is decided here.
"""

from __future__ import annotations

import torch


def compute_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_values: torch.Tensor,
    terminateds: torch.Tensor,
    truncateds: torch.Tensor,
    gamma: float,
    lambda_: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and value targets for a fragment of ``T`` steps of ``B`` envs.

    Every argument is a tensor of shape ``[T, B]`` (any trailing shape works, as long as
    all five agree), on any one device:

    - ``rewards[t, b]``: r_t, the reward of step t.
    - ``values[t, b]``: V(s_t), the critic's value of the observation step t acted on.
    - ``bootstrap_values[t, b]``: V(s_{t+1}) of the *true* next observation of step t.
      For a truncated step that is the final observation the env returned, not the reset
      observation that follows it. Only two kinds of entries are read: those where
      ``truncateds`` is set (and ``terminateds`` is not), and the last step ``t = T-1``.
      Every other entry is ignored; it may hold anything, NaN included.
    - ``terminateds[t, b]``: step t reached a terminal state. Its next value is 0 (there is
      nothing to bootstrap from) and the recursion is cut.
    - ``truncateds[t, b]``: step t ended the episode by a time limit (or another cut that
      is not part of the MDP). It bootstraps from ``bootstrap_values[t]`` and the
      recursion is cut. A step both terminated and truncated counts as terminated.

    A step that is the last of the fragment and not done bootstraps from
    ``bootstrap_values[T-1]``; any other step uses ``values[t+1]`` and the recursion goes on:

        delta_t = r_t + gamma * V_next(t) - V(s_t)
        A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}

    ``lambda_ = 1`` gives Monte-Carlo returns (bootstrapped where the data stops) minus
    V(s_t); ``lambda_ = 0`` gives the TD(0) error. Returns ``(advantages, value_targets)``
    with ``value_targets = advantages + values``, both shaped and typed like ``values``.
    No gradient is meant to flow through them: call this under ``torch.no_grad()`` or
    pass detached values.
    """
    _check_shapes(values, rewards=rewards, bootstrap_values=bootstrap_values,
                  terminateds=terminateds, truncateds=truncateds)
    rewards = rewards.to(values.dtype)
    terminated = terminateds.bool()
    truncated = truncateds.bool()

    deltas = rewards + gamma * values_after(values, bootstrap_values, terminated, truncated) - values

    # The recursion carries A_{t+1} into A_t only within an episode.
    carry = gamma * lambda_ * (~(terminated | truncated)).to(values.dtype)
    advantages = discounted_backward(deltas, carry)
    return advantages, advantages + values


def discounted_returns(rewards: torch.Tensor, terminateds: torch.Tensor,
                       truncateds: torch.Tensor, gamma: float) -> torch.Tensor:
    """``G_t = r_t + gamma * G_{t+1}`` within each episode of a ``[T, B]`` batch, restarting
    after every step that terminated or truncated, with nothing bootstrapped: the return
    after a truncation, or after the fragment's last row, counts as 0. Exact for complete
    episodes (PG's ``batch_mode="complete_episodes"``); otherwise it is biased low near
    the cut, which only a critic could fill in (``compute_gae``)."""
    _check_shapes(rewards, "discounted_returns", terminateds=terminateds, truncateds=truncateds)
    rewards = rewards.float() if not rewards.is_floating_point() else rewards
    carry = gamma * (~(terminateds.bool() | truncateds.bool())).to(rewards.dtype)
    return discounted_backward(rewards, carry)


def discounted_backward(deltas: torch.Tensor, carry: torch.Tensor) -> torch.Tensor:
    """``x[t] = deltas[t] + carry[t] * x[t+1]`` from the last step back (``x[T] = 0``): the
    recursion of GAE and V-trace. On the CPU the loop runs over numpy views of the
    tensors: a numpy step costs about 1 us where a torch one costs 5 (a tenth of an
    IMPALA update here)."""
    out = torch.empty_like(deltas)
    if deltas.device.type == "cpu" and not deltas.requires_grad and not carry.requires_grad:
        d, c, x = deltas.numpy(), carry.numpy(), out.numpy()
    else:
        d, c, x = deltas, carry, out
    last = 0.0
    for t in reversed(range(deltas.shape[0])):
        last = d[t] + c[t] * last
        x[t] = last
    return out


def values_after(values: torch.Tensor, bootstrap_values: torch.Tensor,
                 terminated: torch.Tensor, truncated: torch.Tensor) -> torch.Tensor:
    """V_next(t): values[t+1] inside the fragment, the bootstrap value at its end or where
    the episode was truncated, zero where it terminated (also when truncated as well).

    torch.where, not arithmetic masking, so NaN in an ignored bootstrap entry cannot leak.
    """
    after = torch.cat([values[1:], bootstrap_values[-1:]], dim=0)
    after = torch.where(truncated, bootstrap_values, after)
    return torch.where(terminated, torch.zeros_like(after), after)


def _check_shapes(values: torch.Tensor, where: str = "compute_gae", **others: torch.Tensor) -> None:
    shape = tuple(values.shape)
    for name, x in others.items():
        if tuple(x.shape) != shape:
            raise ValueError(f"{where}: {name} has shape {tuple(x.shape)}, values has {shape}")
    if not shape or shape[0] == 0:
        raise ValueError(f"{where}: need at least one time step, values has shape {shape}")
