"""What a learner reports besides its loss: the mean of each statistic over an update's
steps (read from the device in one go), the value function's explained variance and a
distribution's entropy."""

from __future__ import annotations

from typing import Any

import torch


def mean_stats(steps: list[dict[str, Any]]) -> dict[str, float]:
    """Each statistic's mean over the steps that report it. Tensors are read in one go
    here: a ``float()`` per statistic and minibatch was ~10 reads a step (on a GPU, as
    many syncs)."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    tensors: list[torch.Tensor] = []
    names: list[str] = []
    for step in steps:
        for k, v in step.items():
            counts[k] = counts.get(k, 0) + 1
            if isinstance(v, torch.Tensor):
                tensors.append(v if v.dim() == 0 else v.reshape(()))
                names.append(k)
            else:
                sums[k] = sums.get(k, 0.0) + float(v)
    if tensors:
        with torch.no_grad():
            values = torch.stack(tensors).tolist()
        for k, v in zip(names, values):
            sums[k] = sums.get(k, 0.0) + v
    return {k: sums[k] / counts[k] for k in counts}


def explained_variance(targets: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """1 - Var(targets - values) / Var(targets); 0 where the targets do not vary (a batch of
    one sample, a constant return). Chosen with ``where``, not ``if``: no read of the tensor."""
    with torch.no_grad():
        if len(values) <= 1:
            return values.new_zeros(())
        var = targets.var()
        return torch.where(var > 0, 1 - (targets - values).var() / var, torch.zeros_like(var))


def entropy_of(dist: Any) -> torch.Tensor:
    """Per-sample entropy; a squashed Gaussian has no closed form: a one-sample estimate."""
    return dist.entropy_estimate() if hasattr(dist, "entropy_estimate") else dist.entropy()
