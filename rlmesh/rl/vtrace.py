"""V-trace (Espeholt et al., 2018, IMPALA): off-policy value targets and policy-gradient
advantages over time-major fragments sampled by an older (behaviour) policy.

Episode ends inside a fragment are treated as in ``gae.compute_gae``: a terminated step
has no next value, a truncated one bootstraps from the value of its final observation,
and neither carries the recursion across the boundary.
"""

from __future__ import annotations

import torch

from rlmesh.rl.gae import _check_shapes, discounted_backward, values_after


def vtrace(
    behaviour_logp: torch.Tensor,
    target_logp: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_values: torch.Tensor,
    terminateds: torch.Tensor,
    truncateds: torch.Tensor,
    gamma: float,
    clip_rho_threshold: float | None = 1.0,
    clip_pg_rho_threshold: float | None = 1.0,
    clip_c_threshold: float | None = 1.0,
    lambda_: float = 1.0,
    pg_rho: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(vs, pg_advantages)`` for ``[T, B]`` fragments (any trailing shape, all alike).

    ``behaviour_logp`` are the log-probabilities the runners' policy gave the actions taken,
    ``target_logp`` the learner's policy's; ``values``, ``bootstrap_values``, ``terminateds``
    and ``truncateds`` mean what they mean for ``compute_gae`` (``bootstrap_values`` is read
    at truncations and at the last step). With ``rho_t = pi/mu`` clipped at
    ``clip_rho_threshold`` and ``c_t`` at ``clip_c_threshold`` (None: no clipping):

        delta_t = rho_t (r_t + gamma V_next(t) - V(s_t))
        vs_t - V(s_t) = delta_t + gamma lambda c_t (1 - done_t) (vs_{t+1} - V(s_{t+1}))
        pg_advantage_t = rho_pg_t (r_t + gamma vs_next(t) - V(s_t))

    where ``vs_next(t)`` is ``vs_{t+1}`` inside an episode and ``V_next(t)`` at its end,
    and ``rho_pg`` is ``pi/mu`` clipped at ``clip_pg_rho_threshold``. On-policy (``pi = mu``,
    thresholds >= 1) ``vs`` are the n-step returns bootstrapped where the data stops (with
    ``lambda_`` < 1, the paper's remark 2: ``c_t`` scaled by it, and on-policy ``vs - V``
    are GAE's advantages at that lambda, ``vs`` TD(lambda)'s returns). ``pg_rho=False``
    leaves ``rho_pg`` out of the advantages, for a loss whose ratio pi/mu already weighs
    each sample to the behaviour policy (APPO's behaviour anchor).
    Call under ``torch.no_grad()`` or with detached inputs.
    """
    _check_shapes(values, where="vtrace", behaviour_logp=behaviour_logp, target_logp=target_logp,
                  rewards=rewards, bootstrap_values=bootstrap_values,
                  terminateds=terminateds, truncateds=truncateds)
    dtype = values.dtype
    rewards = rewards.to(dtype)
    terminated, truncated = terminateds.bool(), truncateds.bool()
    ratios = torch.exp(target_logp.to(dtype) - behaviour_logp.to(dtype))
    rhos = ratios if clip_rho_threshold is None else ratios.clamp(max=clip_rho_threshold)
    cs = ratios if clip_c_threshold is None else ratios.clamp(max=clip_c_threshold)
    pg_rhos = ratios if clip_pg_rho_threshold is None else ratios.clamp(max=clip_pg_rho_threshold)

    next_values = values_after(values, bootstrap_values, terminated, truncated)
    deltas = rhos * (rewards + gamma * next_values - values)

    inside = (~(terminated | truncated)).to(dtype)  # the recursion goes on to t + 1
    carry = gamma * lambda_ * cs * inside
    vs = values + discounted_backward(deltas, carry)  # the corrections vs_t - V(s_t)
    # vs_next(t): vs_{t+1} inside the episode and fragment, V_next(t) at either edge.
    vs_next = torch.cat([vs[1:], bootstrap_values[-1:]], dim=0)
    vs_next = torch.where(inside.bool(), vs_next, next_values)
    vs_next[-1] = next_values[-1]
    pg_advantages = rewards + gamma * vs_next - values
    return vs, (pg_rhos * pg_advantages if pg_rho else pg_advantages)
