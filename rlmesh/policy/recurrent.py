"""A recurrent model on a learner's time-major batch: its outputs at every step (each sequence
from the state the runner recorded for its first step), its bootstrap values, and the train
samples as whole zero-padded sequences (``seq_mask``), which minibatches never split."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rlmesh.rl.columns import Columns
from rlmesh.rl.sequences import SequenceIndex, chop_into_sequences

Tensors = dict[str, torch.Tensor]
SEQ_MASK = "seq_mask"  # [S, L]: True on a real step, False on padding


def is_recurrent(model: Any) -> bool:
    return bool(getattr(model, "is_recurrent", False))


def state_keys(batch: Tensors) -> list[str]:
    keys, i = [], 0
    while Columns.state_in(i) in batch:
        keys.append(Columns.state_in(i))
        i += 1
    return keys


def sequence_index(batch: Tensors, max_seq_len: int) -> SequenceIndex:
    done = (batch[Columns.TERMINATEDS].bool() | batch[Columns.TRUNCATEDS].bool()).cpu().numpy()
    return chop_into_sequences(batch[Columns.MASK].bool().cpu().numpy(), done, max_seq_len)


def gather(x: torch.Tensor, index: SequenceIndex) -> torch.Tensor:
    """Time-major ``[T, B, ...]`` -> ``[S, L, ...]``, zeros on padding."""
    t = torch.as_tensor(index.t, device=x.device)
    b = torch.as_tensor(index.b, device=x.device)
    valid = torch.as_tensor(index.valid, device=x.device)
    out = x[t, b]
    return out * valid.reshape(*valid.shape, *[1] * (out.ndim - 2)).to(out.dtype)


def scatter(seqs: torch.Tensor, index: SequenceIndex, steps: int, width: int) -> torch.Tensor:
    """``[S, L, ...]`` back to time-major ``[T, B, ...]``."""
    valid = torch.as_tensor(index.valid, device=seqs.device)
    out = seqs.new_zeros((steps, width, *seqs.shape[2:]))
    t = torch.as_tensor(index.t, device=seqs.device)[valid]
    b = torch.as_tensor(index.b, device=seqs.device)[valid]
    out[t, b] = seqs[valid]
    return out


def _first_states(batch: Tensors, index: SequenceIndex) -> list[torch.Tensor]:
    t0 = torch.as_tensor(index.t[:, 0], device=batch[Columns.MASK].device)
    b0 = torch.as_tensor(index.b[:, 0], device=batch[Columns.MASK].device)
    return [batch[k][t0, b0] for k in state_keys(batch)]


def time_major_outputs(model: Any, batch: Tensors, index: SequenceIndex | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``model`` over every sequence of ``batch``: distribution inputs ``[T*B, n]``, values
    ``[T, B]`` and bootstrap values ``[T, B]`` (after the last row, from the state after it;
    at truncations, of the final observation)."""
    steps, width = batch[Columns.REWARDS].shape
    index = index or sequence_index(batch, model.max_seq_len)
    prev = {k: gather(batch[k], index) for k in (Columns.PREV_ACTIONS, Columns.PREV_REWARDS)
            if k in batch}
    dist_s, values_s, _ = model.forward_seq(
        gather(batch[Columns.OBS], index), _first_states(batch, index),
        prev.get(Columns.PREV_ACTIONS), prev.get(Columns.PREV_REWARDS))
    dist_inputs = scatter(dist_s, index, steps, width).flatten(0, 1)
    values = scatter(values_s, index, steps, width)
    return dist_inputs, values, bootstrap_values(model, batch, values)


def bootstrap_values(model: Any, batch: Tensors, values: torch.Tensor) -> torch.Tensor:
    """V of ``next_obs`` after the last row and of ``trunc_obs`` at truncations, each one
    step on from the state the runner recorded after that step (``state_out``)."""
    steps, width = values.shape
    index = batch["trunc_index"].long().reshape(-1, 2)
    t = torch.cat([torch.full((width,), steps - 1, device=values.device), index[:, 0]])
    b = torch.cat([torch.arange(width, device=values.device), index[:, 1]])
    obs = torch.cat([batch["next_obs"], batch["trunc_obs"]])
    i = 0
    states = []
    while Columns.state_out(i) in batch:
        states.append(batch[Columns.state_out(i)][t, b])
        i += 1
    actions = batch[Columns.ACTIONS][t, b] if model.use_prev_action else None
    rewards = batch[Columns.REWARDS][t, b] if model.use_prev_reward else None
    _, after, _ = model.forward_seq(obs.unsqueeze(1), states,
                                    None if actions is None else actions.unsqueeze(1),
                                    None if rewards is None else rewards.unsqueeze(1))
    after = after[:, 0]
    out = torch.zeros_like(values)
    out[steps - 1] = after[:width]
    if len(index):
        out[index[:, 0], index[:, 1]] = after[width:]
    return out


def sequence_samples(batch: Tensors, index: SequenceIndex, **extra: torch.Tensor) -> Tensors:
    """The train samples as sequences ``[S, L, ...]``: the columns a loss reads, ``extra``
    time-major ones (advantages, targets), each sequence's first state ``[S, ...]`` and
    ``seq_mask``."""
    keys = [Columns.OBS, Columns.ACTIONS, Columns.ACTION_LOGP, Columns.ACTION_DIST_INPUTS,
            Columns.PREV_ACTIONS, Columns.PREV_REWARDS]
    out = {k: gather(batch[k], index) for k in keys if k in batch}
    out.update({k: gather(v, index) for k, v in extra.items()})
    out.update(zip(state_keys(batch), _first_states(batch, index)))
    out[SEQ_MASK] = torch.as_tensor(index.valid, device=batch[Columns.MASK].device)
    return out


def sequence_outputs(model: Any, mb: Tensors) -> tuple[torch.Tensor, torch.Tensor]:
    """``model`` on a minibatch of sequences: distribution inputs and values of its real
    steps, flat (``[N, n]``, ``[N]``), in the order of ``flat_steps``."""
    states = [mb[k] for k in state_keys(mb)]
    dist_inputs, values, _ = model.forward_seq(mb[Columns.OBS], states,
                                               mb.get(Columns.PREV_ACTIONS),
                                               mb.get(Columns.PREV_REWARDS))
    valid = mb[SEQ_MASK]
    return dist_inputs[valid], values[valid]


def flat_steps(mb: Tensors) -> Tensors:
    """The per-step columns of a minibatch of sequences at its real steps, flat."""
    valid, states = mb[SEQ_MASK], set(state_keys(mb))
    return {k: v[valid] for k, v in mb.items() if k != SEQ_MASK and k not in states}


def standardized_steps(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """``x`` ``[S, L]`` standardised over its real steps, zero on padding."""
    real = x[valid]
    if len(real) < 2:
        return x
    return torch.where(valid, (x - real.mean()) / (real.std() + 1e-8), torch.zeros_like(x))


def sequence_minibatches(lengths: np.ndarray, minibatch_size: int,
                         rng: np.random.Generator | None,
                         num_minibatches: int | None = None) -> list[np.ndarray]:
    """One epoch's minibatches of whole sequences, as index arrays: the sequences shuffled
    (``rng``; None keeps their order), each then put in the part of the running count of
    real steps where its middle step falls, so parts hold near-equal steps. Their number is
    ``num_minibatches`` where given (data-parallel ranks), else the real steps over
    ``minibatch_size``, rounded, at least one: so ``minibatch_size`` counts env steps, as
    it does without an LSTM, not padded rows (counting ``max_seq_len`` per sequence made
    three uneven minibatches of a batch meant to be one, the last of a few steps)."""
    order = np.arange(len(lengths)) if rng is None else rng.permutation(len(lengths))
    steps = np.cumsum(np.asarray(lengths)[order])
    total = int(steps[-1]) if len(steps) else 0
    parts = num_minibatches or max(1, round(total / max(minibatch_size, 1)))
    parts = max(1, min(parts, len(order)))
    middle = steps - np.asarray(lengths)[order] / 2
    which = np.minimum((middle * parts / max(total, 1)).astype(np.int64), parts - 1)
    return [part for part in (order[which == k] for k in range(parts)) if len(part)]

