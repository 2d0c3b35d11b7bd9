"""Sample batches: concatenating fragments, flattening time, epoch minibatches, and
tensors that share memory where they may and copy read-only wire buffers."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from rlmesh.rl import Columns, concat_fragments, flatten_time, minibatches, to_tensors
from rlmesh.wire import codec


def fragment(T, B, start=0.0, tensor=False):
    """Each value encodes (env, step) so placement after a reshape can be checked."""
    obs = start + np.arange(T)[:, None, None] + 100 * np.arange(B)[None, :, None] + np.zeros((1, 1, 3))
    frag = {Columns.OBS: obs.astype(np.float32), Columns.REWARDS: obs[..., 0].astype(np.float32),
            Columns.TERMINATEDS: np.zeros((T, B), dtype=bool)}
    return {k: torch.from_numpy(v) for k, v in frag.items()} if tensor else frag


@pytest.mark.parametrize("tensor", [False, True])
def test_concat_fragments_along_envs(tensor):
    a, b = fragment(4, 2, tensor=tensor), fragment(4, 3, start=1000, tensor=tensor)
    out = concat_fragments([a, b])
    assert out[Columns.OBS].shape == (4, 5, 3) and out[Columns.REWARDS].shape == (4, 5)
    rewards = np.asarray(out[Columns.REWARDS])
    np.testing.assert_array_equal(rewards[:, :2], np.asarray(a[Columns.REWARDS]))
    np.testing.assert_array_equal(rewards[:, 2:], np.asarray(b[Columns.REWARDS]))
    assert isinstance(out[Columns.OBS], torch.Tensor) == tensor


def test_concat_refuses_mismatched_fragments():
    with pytest.raises(ValueError, match="fragment 1 has T = 5, fragment 0 has T = 4"):
        concat_fragments([fragment(4, 2), fragment(5, 2)])
    b = fragment(4, 2)
    del b[Columns.TERMINATEDS]
    with pytest.raises(ValueError, match="fragment 1 has columns"):
        concat_fragments([fragment(4, 2), b])
    bad = fragment(4, 2)
    bad[Columns.REWARDS] = bad[Columns.REWARDS][:3]
    with pytest.raises(ValueError, match="column 'rewards' has \\[T, B\\] = \\[3, 2\\]"):
        concat_fragments([bad])
    with pytest.raises(ValueError, match="time-major"):
        concat_fragments([{"x": np.zeros(3)}])


@pytest.mark.parametrize("tensor", [False, True])
def test_flatten_time_orders_step_major(tensor):
    flat = flatten_time(fragment(3, 4, tensor=tensor))
    assert flat[Columns.OBS].shape == (12, 3) and flat[Columns.TERMINATEDS].shape == (12,)
    # sample t*B + b is step t of env b: value t + 100 b
    want = [t + 100 * b for t in range(3) for b in range(4)]
    assert np.asarray(flat[Columns.REWARDS]).tolist() == want


@pytest.mark.parametrize("n,size", [(12, 4), (10, 3), (5, 8), (1, 1)])
def test_minibatches_cover_every_sample_once(n, size):
    rng = np.random.default_rng(0)
    batch = {"x": np.arange(n), "y": torch.zeros(n, 2)}
    mbs = list(minibatches(batch, size, rng))
    assert [len(m) for m in mbs] == [size] * (n // size) + ([n % size] if n % size else [])
    assert sorted(np.concatenate(mbs).tolist()) == list(range(n))


def test_minibatches_shuffle_differently_each_epoch():
    rng = np.random.default_rng(0)
    first = np.concatenate(list(minibatches(1000, 100, rng)))
    second = np.concatenate(list(minibatches(1000, 100, rng)))
    assert not np.array_equal(first, second) and not np.array_equal(first, np.arange(1000))


def test_minibatches_refuse_bad_input():
    with pytest.raises(ValueError, match="at least 1"):
        next(minibatches(10, 0, np.random.default_rng()))
    with pytest.raises(ValueError, match="differ in length"):
        next(minibatches({"a": np.zeros(3), "b": np.zeros(4)}, 2, np.random.default_rng()))


def test_to_tensors_shares_writable_arrays():
    batch = {"obs": np.ones((4, 3), np.float32), "done": np.zeros(4, bool), "t": torch.arange(4)}
    out = to_tensors(batch, "cpu")
    assert out["obs"].data_ptr() == batch["obs"].ctypes.data
    assert out["done"].dtype == torch.bool and out["t"] is batch["t"]


def test_to_tensors_copies_read_only_wire_arrays_without_warning():
    sent = np.arange(12, dtype=np.float32).reshape(3, 4) * 1.5
    frames = codec.encode({"obs": sent}, inline_threshold=0)
    received = codec.decode(frames)["obs"]
    assert not received.flags.writeable
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = to_tensors({"obs": received}, "cpu")
    out["obs"] += 1  # must not reach the received buffer (over inproc: the sender's array)
    np.testing.assert_array_equal(received, sent)
    np.testing.assert_array_equal(out["obs"].numpy(), sent + 1)


def test_to_tensors_handles_odd_layouts():
    reversed_view = np.arange(6, dtype=np.float32)[::-1]
    big_endian = np.arange(3, dtype=">f4")
    out = to_tensors({"r": reversed_view, "b": big_endian})
    assert out["r"].tolist() == [5, 4, 3, 2, 1, 0] and out["b"].tolist() == [0, 1, 2]


def test_to_tensors_read_only_to_another_device_without_warning():
    # "meta" stands in for an accelerator: the branch that copies straight to the device.
    received = codec.decode(codec.encode({"x": np.ones((4, 2), np.float32)}, inline_threshold=0))["x"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = to_tensors({"x": received}, "meta")
    assert out["x"].device.type == "meta" and out["x"].shape == (4, 2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_to_tensors_on_cuda_copies_values():
    received = codec.decode(codec.encode({"x": np.arange(6, dtype=np.float32)}, inline_threshold=0))["x"]
    out = to_tensors({"x": received, "y": np.zeros(2)}, "cuda")
    assert out["x"].is_cuda and out["x"].cpu().tolist() == list(range(6))
