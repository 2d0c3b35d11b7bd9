"""The checkpoint format on its own: round trip, atomic replacement, clear errors."""

from __future__ import annotations

import msgpack
import pytest
import torch

from rlmesh.driver import checkpoints
from rlmesh.algorithms.ppo_config import PPOConfig


class FakeAlgo:
    def __init__(self, iteration: int) -> None:
        self.config = PPOConfig().environment("CartPole-v1")
        self.iteration = iteration
        self.timesteps_total = 100 * iteration
        self.episodes_total = iteration
        self.time_total_s = 1.5
        self.num_env_steps_trained = 100 * iteration
        self.policy_specs = {"default_policy": {"policy_class": "rlmesh.algorithms.ppo:PPOTorchPolicy"}}


def policy_state(value: float) -> dict:
    return {"model": {"w": torch.full((2, 2), value)}, "optimizer": {"state": {}, "param_groups": []},
            "state": {"cur_kl_coeff": 0.2}, "num_updates": 1, "num_env_steps_trained": 10}


def state(value: float) -> dict:
    return {"policies": {"default_policy": policy_state(value)}, "num_updates": 1}


def test_round_trip_keeps_config_counters_and_tensors(tmp_path):
    path = checkpoints.write(tmp_path / "ckpt", FakeAlgo(3), state(1.0))
    meta, loaded = checkpoints.read(path, trust_code=True)  # FakeAlgo: code outside rlmesh
    assert meta["format_version"] == checkpoints.FORMAT_VERSION
    assert meta["algorithm"].endswith(":FakeAlgo") and meta["config"]["env"] == "CartPole-v1"
    assert meta["counters"]["training_iteration"] == 3
    assert torch.equal(loaded["policies"]["default_policy"]["model"]["w"], torch.full((2, 2), 1.0))
    assert meta["policies"] == FakeAlgo(3).policy_specs


def test_a_version_1_checkpoint_reads_as_the_default_policy(tmp_path):
    path = checkpoints.write(tmp_path / "ckpt", FakeAlgo(3), state(1.0))
    meta_file = tmp_path / "ckpt" / checkpoints.META
    meta = msgpack.unpackb(meta_file.read_bytes())
    meta["format_version"] = 1
    del meta["policies"]
    meta_file.write_bytes(msgpack.packb(meta))
    torch.save(policy_state(4.0), tmp_path / "ckpt" / checkpoints.STATE)  # v1: one policy's state
    _, loaded = checkpoints.read(path, trust_code=True)
    assert torch.equal(loaded["policies"]["default_policy"]["model"]["w"], torch.full((2, 2), 4.0))


def test_a_crash_mid_save_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    path = checkpoints.write(tmp_path / "ckpt", FakeAlgo(1), state(1.0))

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(OSError, match="disk full"):
        checkpoints.write(tmp_path / "ckpt", FakeAlgo(2), state(2.0))
    meta, loaded = checkpoints.read(path, trust_code=True)
    assert meta["counters"]["training_iteration"] == 1
    assert torch.equal(loaded["policies"]["default_policy"]["model"]["w"], torch.full((2, 2), 1.0))
    monkeypatch.undo()
    checkpoints.write(tmp_path / "ckpt", FakeAlgo(2), state(2.0))  # and the next save works
    assert checkpoints.read(path, trust_code=True)[0]["counters"]["training_iteration"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no leftovers


def test_not_a_checkpoint_and_wrong_version_are_clear_errors(tmp_path):
    with pytest.raises(checkpoints.CheckpointError, match="not an rlmesh checkpoint"):
        checkpoints.read(tmp_path)
    path = checkpoints.write(tmp_path / "ckpt", FakeAlgo(1), state(1.0))
    meta_file = tmp_path / "ckpt" / checkpoints.META
    meta = msgpack.unpackb(meta_file.read_bytes())
    meta["format_version"] = 99
    meta_file.write_bytes(msgpack.packb(meta))
    with pytest.raises(checkpoints.CheckpointError, match="version 99"):
        checkpoints.read(path)


def test_a_save_removes_the_temp_dirs_of_dead_saves_and_puts_back_a_lone_old(tmp_path):
    import os
    import subprocess

    proc = subprocess.Popen(["true"])
    proc.wait()
    dead, live = proc.pid, os.getpid()
    checkpoints.write(tmp_path / "a", FakeAlgo(1), state(1.0))
    (tmp_path / "a").rename(tmp_path / f".a.old-{dead}")  # killed between the two renames
    for name in (f".b.tmp-{dead}", f".a.old-{live}x", f".c.tmp-{live}"):
        (tmp_path / name).mkdir()
    checkpoints.write(tmp_path / "d", FakeAlgo(2), state(2.0))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["a", "d", f".a.old-{live}x", f".c.tmp-{live}"])  # a live save's, and no temp name
    assert checkpoints.read(tmp_path / "a", trust_code=True)[0]["counters"]["training_iteration"] == 1
