"""Recurrent training's sequences, without torch: a time-major batch ``[T, B]`` cut into
sequences of at most ``max_seq_len`` steps, never across an episode start, zero-padded to one
length with a mask (RLlib's ``chop_into_sequences``). Each sequence starts from the recurrent
state the runner recorded for its first step (``state_in``), so a cut needs no history.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SequenceIndex:
    """Where each step of each sequence lies in the time-major batch: sequence ``s``'s
    step ``i`` is row ``t[s, i]`` of env column ``b[s, i]`` where ``valid[s, i]``; padding
    points at row 0 of column 0 and is not valid."""

    t: np.ndarray  # [S, L] int64
    b: np.ndarray  # [S, L] int64
    valid: np.ndarray  # [S, L] bool

    @property
    def lengths(self) -> np.ndarray:
        return self.valid.sum(1)

    @property
    def num_sequences(self) -> int:
        return len(self.t)


def sequence_spans(mask: np.ndarray, done: np.ndarray, max_seq_len: int
                   ) -> list[tuple[int, int, int]]:
    """``(b, t0, length)`` of every sequence, column by column in time order. A sequence
    ends after ``max_seq_len`` steps, after a step that ended its episode (``done``), and
    before a row that is not valid (``mask`` False: padding, or a discarded episode)."""
    if max_seq_len < 1:
        raise ValueError(f"max_seq_len must be at least 1, got {max_seq_len}")
    mask, done = np.asarray(mask, bool), np.asarray(done, bool)
    if mask.shape != done.shape or mask.ndim != 2:
        raise ValueError(f"mask {mask.shape} and done {done.shape} must both be [T, B]")
    spans = []
    steps, width = mask.shape
    for b in range(width):
        start, length = 0, 0
        for t in range(steps):
            if not mask[t, b]:
                if length:
                    spans.append((b, start, length))
                length = 0
                continue
            if length == 0:
                start = t
            length += 1
            if done[t, b] or length == max_seq_len:
                spans.append((b, start, length))
                length = 0
        if length:
            spans.append((b, start, length))
    return spans


def chop_into_sequences(mask: np.ndarray, done: np.ndarray, max_seq_len: int,
                        pad_to: int | None = None) -> SequenceIndex:
    """The ``SequenceIndex`` of ``sequence_spans``, padded to the longest sequence (or to
    ``pad_to``, at least that long: one shape for every batch)."""
    spans = sequence_spans(mask, done, max_seq_len)
    longest = max((n for _, _, n in spans), default=1)
    width = max(longest, pad_to or 0)
    t = np.zeros((len(spans), width), np.int64)
    b = np.zeros((len(spans), width), np.int64)
    valid = np.zeros((len(spans), width), bool)
    for s, (col, t0, n) in enumerate(spans):
        t[s, :n] = np.arange(t0, t0 + n)
        b[s, :n] = col
        valid[s, :n] = True
    return SequenceIndex(t, b, valid)


def to_sequences(column: np.ndarray, index: SequenceIndex) -> np.ndarray:
    """A time-major column ``[T, B, ...]`` as ``[S, L, ...]``, zeros on padding."""
    out = np.asarray(column)[index.t, index.b]
    out[~index.valid] = 0
    return out


def from_sequences(seqs: np.ndarray, index: SequenceIndex, steps: int, width: int) -> np.ndarray:
    """The inverse of ``to_sequences``: ``[S, L, ...]`` back to ``[T, B, ...]`` (zeros where
    no sequence covers a row)."""
    seqs = np.asarray(seqs)
    out = np.zeros((steps, width, *seqs.shape[2:]), seqs.dtype)
    out[index.t[index.valid], index.b[index.valid]] = seqs[index.valid]
    return out
