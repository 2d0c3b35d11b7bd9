"""Batches on the learner: epoch minibatches, and tensors that share memory where they may
and copy read-only wire buffers."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from rlmesh.rl import minibatches, to_tensors
from rlmesh.wire import codec


@pytest.mark.parametrize("n,size", [(12, 4), (10, 3), (5, 8), (1, 1)])
def test_minibatches_cover_every_sample_once(n, size):
    rng = np.random.default_rng(0)
    mbs = list(minibatches(n, size, rng))
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


def test_minibatches_keep_the_order_without_a_generator_and_cut_into_given_parts():
    assert np.concatenate(list(minibatches(10, 3, None))).tolist() == list(range(10))
    parts = list(minibatches(10, 3, np.random.default_rng(0), num_minibatches=4))
    assert len(parts) == 4 and sorted(np.concatenate(parts).tolist()) == list(range(10))


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
