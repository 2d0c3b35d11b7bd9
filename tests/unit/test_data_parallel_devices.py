"""Where a data-parallel learner trains and how a batch gets there: device choice for
CPU, GPUs and fake GPUs, the backend for a device, host arrays to tensors, and the
loopback-only rendezvous address."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlmesh.policy.device import learner_device, to_device
from rlmesh.roles.data_parallel import backend_for, rendezvous_address

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_no_gpus_asked_means_cpu_whatever_is_installed():
    assert learner_device(0, local_rank=3) == torch.device("cpu")
    assert learner_device(0.0, local_rank=0, fake_gpus=True) == torch.device("cpu")


@no_cuda
def test_fake_gpus_run_the_gpu_configuration_on_the_cpu():
    assert learner_device(1, local_rank=1, fake_gpus=True) == torch.device("cpu")
    assert learner_device(0.25, local_rank=0, fake_gpus=True) == torch.device("cpu")


@no_cuda
def test_gpus_without_cuda_is_an_error_that_says_what_to_change():
    with pytest.raises(RuntimeError) as info:
        learner_device(0.5, local_rank=0)
    message = str(info.value)
    for words in ("num_gpus_per_learner=0.5", "no CUDA device", "num_gpus_per_learner=0",
                  "_fake_gpus=True"):
        assert words in message


def test_negative_gpus_are_refused():
    with pytest.raises(ValueError, match="must be >= 0"):
        learner_device(-1, local_rank=0)


@needs_cuda
def test_learners_go_round_robin_over_visible_gpus():
    count = torch.cuda.device_count()
    devices = [learner_device(0.5, local_rank=r) for r in range(2 * count)]
    assert devices == [torch.device("cuda", r % count) for r in range(2 * count)]


def test_backend_for_device():
    assert backend_for(torch.device("cpu")) == "gloo"
    assert backend_for(torch.device("cuda", 1)) == "nccl"
    # NCCL refuses two ranks on one GPU; fractional learners sharing one reduce with gloo.
    assert backend_for(torch.device("cuda", 0), devices_shared=True) == "gloo"


def test_to_device_copies_read_only_buffers_and_keeps_dtypes():
    raw = np.arange(12, dtype=np.float32).tobytes()
    received = np.frombuffer(raw, dtype=np.float32).reshape(3, 4)  # like a zmq frame view
    assert not received.flags.writeable
    batch = {"obs": received,
             "actions": np.array([1, 0, 2], dtype=np.int64),
             "dones": np.array([True, False, True]),
             "rewards": np.array([0.5, 1.5, -1.0], dtype=np.float64),
             "pixels": np.full((2, 2), 7, dtype=np.uint8),
             "reversed": np.arange(5, dtype=np.int32)[::-1]}
    out = to_device(batch, torch.device("cpu"))
    assert list(out) == list(batch)
    for key, array in batch.items():
        assert isinstance(out[key], torch.Tensor) and out[key].device.type == "cpu"
        assert out[key].numpy().dtype == array.dtype, key
        np.testing.assert_array_equal(out[key].numpy(), array)
    out["obs"].add_(1)  # writable memory of its own: the receive buffer is untouched
    assert np.frombuffer(raw, dtype=np.float32)[0] == 0


def test_to_device_shares_writable_arrays_and_passes_tensors_through_on_cpu():
    array = np.zeros((4, 2), dtype=np.float32)
    tensor = torch.ones(3)
    out = to_device({"a": array, "t": tensor}, torch.device("cpu"))
    assert out["t"] is tensor
    assert np.shares_memory(out["a"].numpy(), array)


@needs_cuda
def test_to_device_on_cuda_keeps_values_and_dtypes():
    device = torch.device("cuda", 0)
    received = np.frombuffer(np.arange(6, dtype=np.int64).tobytes(), dtype=np.int64)
    out = to_device({"x": received, "t": torch.ones(2, dtype=torch.float16)}, device)
    torch.cuda.synchronize()
    assert out["x"].device == device and out["x"].dtype == torch.int64
    assert out["x"].cpu().tolist() == list(range(6))
    assert out["t"].device == device and out["t"].dtype == torch.float16


@needs_cuda
def test_to_device_copies_from_page_locked_memory():
    """The copy to the GPU starts from pinned host memory (CUPTI names each copy's kind:
    'Memcpy HtoD (Pinned -> Device)'), so it need not block the host."""
    from torch.profiler import ProfilerActivity, profile

    batch = {"x": np.ones((256, 1024), np.float32), "y": np.arange(512)}
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        to_device(batch, torch.device("cuda", 0))
        torch.cuda.synchronize()
    copies = [e.name for e in prof.events() if "Memcpy HtoD" in e.name]
    assert len(copies) >= 2 and all("Pinned" in name for name in copies), copies


@pytest.mark.parametrize("address, expected", [
    ("tcp://127.0.0.1:29500", ("127.0.0.1", 29500)),
    ("127.0.0.1:29500", ("127.0.0.1", 29500)),
    ("tcp://localhost:1234", ("127.0.0.1", 1234)),
    ("tcp://[::1]:1234", ("::1", 1234)),
    # a launched cluster's nodes on a private network
    ("tcp://10.1.2.3:29500", ("10.1.2.3", 29500)),
    ("tcp://192.168.7.2:41000", ("192.168.7.2", 41000)),
    ("tcp://[fd00::5]:41000", ("fd00::5", 41000)),
])
def test_loopback_and_private_addresses_are_accepted(address, expected):
    assert rendezvous_address(address) == expected


@pytest.mark.parametrize("address", ["tcp://0.0.0.0:29500", "tcp://example.com:29500",
                                     "ipc:///tmp/x", "tcp://127.0.0.1"])
def test_addresses_that_name_no_peer_are_refused(address):
    with pytest.raises(ValueError, match="rendezvous at tcp://IP:PORT"):
        rendezvous_address(address)


def test_a_public_address_is_refused_unless_the_setting_allows_it():
    # the learners' torch.distributed traffic is neither authenticated nor encrypted
    with pytest.raises(ValueError, match="learner_rendezvous_private_only=False"):
        rendezvous_address("tcp://8.8.4.4:29500")
    assert rendezvous_address("tcp://8.8.4.4:29500", private_only=False) == ("8.8.4.4", 29500)


# --- learners that cannot get their GPUs: one line before any process starts ---

@pytest.mark.parametrize("learners, gpus, visible, words", [
    (2, 1, 1, "num_learners=2 x num_gpus_per_learner=1 needs 2 GPUs; this machine has 1"),
    (3, 0.5, 1, "num_learners=3 x num_gpus_per_learner=0.5 needs 2 GPUs"),
    (1, 0.3, 4, "num_gpus_per_learner=0.3 does not divide a GPU evenly"),
    (1, 2, 4, "num_gpus_per_learner=2: a learner trains on one GPU"),
    (1, 1, 0, "no CUDA device is visible here"),
])
def test_learner_gpus_that_cannot_be_had_are_one_line(learners, gpus, visible, words):
    from rlmesh.config.base import ConfigError
    from rlmesh.config.learner_gpus import check_learner_gpus

    with pytest.raises(ConfigError) as info:
        check_learner_gpus(learners, gpus, visible=visible)
    assert words in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("learners, gpus, visible, fake", [
    (2, 0.5, 1, False), (4, 0.25, 1, False), (2, 1, 2, False), (1, 0, 0, False),
    (2, 1, 0, True),  # _fake_gpus: the GPU configuration on the CPU
])
def test_learner_gpus_that_fit_pass(learners, gpus, visible, fake):
    from rlmesh.config.learner_gpus import check_learner_gpus

    check_learner_gpus(learners, gpus, fake, visible=visible)


def test_an_update_out_of_gpu_memory_names_the_batch_sizes_to_lower():
    import gymnasium as gym

    from rlmesh.algorithms.ppo import PPOConfig, PPOTorchPolicy
    from rlmesh.policy.policy_spec import PolicySpec
    from rlmesh.roles.learner import Learner, LearnerOutOfMemory

    config = PPOConfig().training(train_batch_size=4000, minibatch_size=512)
    env = gym.make("CartPole-v1")
    spec = PolicySpec(PPOTorchPolicy).resolved(None, env.observation_space, env.action_space)
    learner = Learner(config, {"default_policy": spec.to_data(config)})

    def out_of_memory(*args, **kwargs):  # what torch raises when the allocator gives up
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    learner.policy("default_policy").update = out_of_memory
    with pytest.raises(LearnerOutOfMemory) as info:
        learner.update_from_batch({"default_policy": {"obs": np.zeros((10, 4), np.float32)}}, 0)
    message = str(info.value)
    assert "ran out of memory in policy 'default_policy'" in message
    assert "train_batch_size=4000" in message and "minibatch_size=512" in message
    assert "lower minibatch_size" in message and "\n" not in message
