"""The actor-critic train batch (PPO, A2C, A3C): the critic's values of a time-major batch,
its bootstrap values where the data stops, GAE, and the valid samples laid out flat."""

from __future__ import annotations

import torch

from rlmesh.policy.recurrent import (is_recurrent, sequence_index, sequence_samples,
                                     standardized_steps, time_major_outputs)
from rlmesh.rl.default_model import model_values
from rlmesh.rl.gae import compute_gae


def gae_samples(model: torch.nn.Module, batch: dict[str, torch.Tensor], gamma: float,
                lambda_: float) -> dict[str, torch.Tensor]:
    """Flat valid samples of ``batch`` (time-major ``[T, B]`` columns with ``next_obs``,
    ``trunc_index`` and ``trunc_obs``) with ``values``, ``advantages`` and
    ``value_targets``. ``model(obs)`` returns ``(dist_inputs, values)``. A recurrent model's
    samples are whole sequences instead (``recurrent_gae_samples``)."""
    if is_recurrent(model):
        return recurrent_gae_samples(model, batch, gamma, lambda_)
    t, b = batch["rewards"].shape
    with torch.no_grad():
        # The values the runners recorded when acting (a shared trunk: torch_policy.py),
        # else a forward pass here (of the value trunk alone where the model has one).
        values = (batch["vf_preds"].reshape(t, b).float() if "vf_preds" in batch
                  else model_values(model, batch["obs"].flatten(0, 1)).reshape(t, b))
        # V(s_{t+1}) where the fragment cannot supply it: after its last row, and at
        # truncations (the env's final observation, not the reset one).
        bootstrap = torch.zeros_like(values)
        bootstrap[t - 1] = model_values(model, batch["next_obs"])
        index = batch["trunc_index"]
        if len(index):
            bootstrap[index[:, 0], index[:, 1]] = model_values(model, batch["trunc_obs"])
        advantages, targets = compute_gae(
            batch["rewards"], values, bootstrap, batch["terminateds"], batch["truncateds"],
            gamma, lambda_)
    valid = batch["mask"].flatten()
    flat = {
        "obs": batch["obs"].flatten(0, 1), "actions": batch["actions"].flatten(0, 1),
        "action_logp": batch["action_logp"].flatten(), "values": values.flatten(),
        "action_dist_inputs": batch["action_dist_inputs"].flatten(0, 1),
        "advantages": advantages.flatten(), "value_targets": targets.flatten(),
    }
    if bool(valid.all()):  # the common case: no padding, and no copy of the frames
        return flat
    return {k: v[valid] for k, v in flat.items()}


def recurrent_gae_samples(model: torch.nn.Module, batch: dict[str, torch.Tensor], gamma: float,
                          lambda_: float) -> dict[str, torch.Tensor]:
    """``gae_samples`` of a recurrent model: values from its sequences, GAE over the
    time-major batch, the samples as padded sequences ``[S, L, ...]`` with ``seq_mask``."""
    index = sequence_index(batch, model.max_seq_len)
    with torch.no_grad():
        _, values, bootstrap = time_major_outputs(model, batch, index)
        advantages, targets = compute_gae(
            batch["rewards"], values, bootstrap, batch["terminateds"], batch["truncateds"],
            gamma, lambda_)
    return sequence_samples(batch, index, values=values, advantages=advantages,
                            value_targets=targets)


def standardized(x: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
    """Zero mean, unit variance (left as is for a single sample, which has no variance);
    with ``valid`` (sequences' ``seq_mask``), over the real steps, padding zero."""
    if valid is not None:
        return standardized_steps(x, valid)
    return (x - x.mean()) / (x.std() + 1e-8) if len(x) > 1 else x

