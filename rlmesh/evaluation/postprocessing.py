"""RLlib's ``compute_advantages`` and ``Postprocessing`` for a policy's ``postprocess_fn``:
one trajectory's advantages and value targets, computed by rlmesh's GAE code
(``rl/gae.py``; PPO computes the same over the whole time-major batch at once)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rlmesh.rl.columns import Columns, MissingColumn
from rlmesh.rl.gae import compute_gae, discounted_backward


class Postprocessing:
    """The column names ``compute_advantages`` adds (RLlib's)."""

    ADVANTAGES = Columns.ADVANTAGES
    VALUE_TARGETS = Columns.VALUE_TARGETS


def compute_advantages(rollout: Any, last_r: float, gamma: float = 0.9, lambda_: float = 1.0,
                       use_gae: bool = True, use_critic: bool = True) -> Any:
    """``rollout`` (one trajectory in time order, a ``SampleBatch``) with ``advantages`` and
    ``value_targets`` added, as RLlib's function of that name; ``last_r`` is the value after
    its last step (0 where the episode ended).

    ``use_gae``: GAE(gamma, lambda_) over the ``vf_preds`` column (return it from
    ``extra_action_out_fn``). Otherwise the discounted returns; with ``use_critic`` and a
    ``vf_preds`` column the advantages are the returns minus it, else the returns
    themselves and zero value targets (RLlib before ``use_critic``, as the seed's policy
    gradient example calls it)."""
    rewards = np.asarray(rollout[Columns.REWARDS], np.float32)
    n = len(rewards)
    has_values = Columns.VF_PREDS in rollout
    if use_gae:
        if not has_values:
            raise MissingColumn(
                f"compute_advantages(use_gae=True) needs the {Columns.VF_PREDS!r} column (it has "
                f"{sorted(rollout)}): return it from extra_action_out_fn, "
                "{SampleBatch.VF_PREDS: model.value_function()}, or pass use_gae=False")
        values = torch.as_tensor(np.asarray(rollout[Columns.VF_PREDS], np.float32),
                                 device="cpu").reshape(n, 1)  # a trajectory's numpy columns
        bootstrap = torch.zeros_like(values)
        bootstrap[-1] = float(last_r)
        never = torch.zeros_like(values, dtype=torch.bool)
        adv, targets = compute_gae(torch.as_tensor(rewards, device="cpu").reshape(n, 1), values, bootstrap,
                                   never, never, gamma, lambda_)
        advantages, value_targets = adv.reshape(n).numpy(), targets.reshape(n).numpy()
    else:
        returns = discount_cumsum(np.append(rewards, np.float32(last_r)), gamma)[:-1]
        if use_critic and has_values:
            advantages = returns - np.asarray(rollout[Columns.VF_PREDS], np.float32)
            value_targets = returns
        else:
            advantages, value_targets = returns, np.zeros_like(returns)
    rollout[Postprocessing.ADVANTAGES] = np.asarray(advantages, np.float32)
    rollout[Postprocessing.VALUE_TARGETS] = np.asarray(value_targets, np.float32)
    return rollout


def discount_cumsum(x: np.ndarray, gamma: float) -> np.ndarray:
    """``y[t] = x[t] + gamma * y[t+1]`` (RLlib's ``discount_cumsum``), float32."""
    x = torch.as_tensor(np.asarray(x, np.float32).copy(), device="cpu")
    return discounted_backward(x, torch.full_like(x, gamma)).numpy()


__all__ = ["Postprocessing", "compute_advantages", "discount_cumsum"]
