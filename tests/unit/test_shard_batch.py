"""Data-parallel shards of a time-major batch: every rank gets data, and the advantages
computed on the shards are the ones computed on the whole batch (issue 36, point 7)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlmesh.algorithms.advantages import gae_samples
from rlmesh.rl.columns import fold_time, shard_batch


class _IdValue(torch.nn.Module):
    """obs = [step id, x]: V(obs) = tanh(x), so values do not depend on where a row sits."""

    def forward(self, obs):
        return obs[..., :1], torch.tanh(obs[..., 1])


def _batch(t: int, b: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    obs = np.stack([np.arange(t * b, dtype=np.float32).reshape(t, b),
                    rng.normal(size=(t, b)).astype(np.float32)], axis=-1)
    terminateds = rng.random((t, b)) < 0.1
    truncateds = (rng.random((t, b)) < 0.1) & ~terminateds
    trunc_index = np.argwhere(truncateds).astype(np.int64)
    return {"obs": obs, "actions": rng.integers(0, 2, (t, b)),
            "rewards": rng.normal(size=(t, b)).astype(np.float32),
            "terminateds": terminateds, "truncateds": truncateds, "mask": np.ones((t, b), bool),
            "action_logp": np.zeros((t, b), np.float32),
            "action_dist_inputs": np.zeros((t, b, 2), np.float32),
            "next_obs": np.stack([np.full(b, -1.0), rng.normal(size=b)], -1).astype(np.float32),
            "trunc_index": trunc_index,
            "trunc_obs": rng.normal(size=(len(trunc_index), 2)).astype(np.float32)}


def _advantages_by_id(batch: dict[str, np.ndarray]) -> dict[int, float]:
    flat = gae_samples(_IdValue(), {k: torch.as_tensor(v) for k, v in batch.items()}, 0.9, 0.8)
    ids = flat["obs"][:, 0].long().tolist()
    return dict(zip(ids, flat["advantages"].tolist()))


def _time_slice(batch: dict[str, np.ndarray], lo: int, hi: int) -> dict[str, np.ndarray]:
    """Rows [lo, hi) as a batch of their own, bootstrapping from the row after: what a
    fragment of those rows would have been."""
    t = len(batch["mask"])
    out = {k: batch[k][lo:hi] for k in ("obs", "actions", "rewards", "terminateds",
                                         "truncateds", "mask", "action_logp",
                                         "action_dist_inputs")}
    out["next_obs"] = batch["obs"][hi] if hi < t else batch["next_obs"]
    mine = (batch["trunc_index"][:, 0] >= lo) & (batch["trunc_index"][:, 0] < hi)
    out["trunc_index"] = batch["trunc_index"][mine] - [lo, 0]
    out["trunc_obs"] = batch["trunc_obs"][mine]
    return out


@pytest.mark.parametrize("t,b,n", [(8, 1, 2), (7, 1, 2), (10, 1, 3), (9, 2, 3), (5, 3, 2)])
def test_every_rank_gets_data_and_the_advantages_of_its_rows(t, b, n):
    batch = _batch(t, b, seed=t * 10 + b)
    shards = shard_batch(batch, n)
    assert len(shards) == n
    assert all(s["mask"].sum() > 0 for s in shards)  # the old split gave a rank [T, 0]
    joined = {k: v for s in shards for k, v in _advantages_by_id(s).items()}
    assert sorted(joined) == list(range(t * b))  # every step once, no padding row among them
    # A cut along time is a fragment boundary: GAE bootstraps from V(s) of the next row
    # there, exactly as for fragments that long.
    pieces = -(-n // b) if b < n else 1
    rows = -(-t // pieces)
    bounds = [max(0, t - rows * (pieces - j)) for j in range(pieces)] + [t]
    expected = {k: v for lo, hi in zip(bounds, bounds[1:])
                for k, v in _advantages_by_id(_time_slice(batch, lo, hi)).items()}
    for step, adv in expected.items():
        assert joined[step] == pytest.approx(adv, rel=1e-5, abs=1e-5), step
    if pieces == 1:  # a cut along B alone changes nothing
        assert expected == pytest.approx(_advantages_by_id(batch))


def test_fold_pads_the_first_piece_and_moves_truncations():
    batch = _batch(5, 1)
    batch["truncateds"][:] = False
    batch["truncateds"][3, 0] = True
    batch["trunc_index"] = np.array([[3, 0]])
    batch["trunc_obs"] = np.array([[99.0, 0.5]], np.float32)
    folded = fold_time(batch, 2)  # 5 rows: one padding row, then pieces of 3
    assert folded["mask"].tolist() == [[False, True], [True, True], [True, True]]
    assert folded["obs"][1:, 0, 0].tolist() == [0.0, 1.0]
    assert folded["next_obs"][0, 0] == 2.0  # the second piece's first row
    assert folded["trunc_index"].tolist() == [[1, 1]]  # padded row 4: piece 1, row 1
