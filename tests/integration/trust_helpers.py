"""Shared by the code-trust tests: a bare zmq call to an actor's socket, as any process of the
user could make, and a one-iteration CartPole PPO checkpoint to edit."""

from __future__ import annotations

from pathlib import Path

import zmq

from rlmesh.algorithms import PPOConfig
from rlmesh.wire import codec, messages as M


def raw_call(address: str, method: str, *args) -> dict:
    """``method(*args)`` sent to an actor's socket by a bare zmq client; the reply message."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.linger = 0
    sock.connect(address)
    try:
        sock.send_multipart(codec.encode(M.make(M.CALL, id=1, m=method, a=list(args), k={})))
        assert sock.poll(60_000), f"no reply to {method}"
        return M.validate(codec.decode(sock.recv_multipart()))
    finally:
        sock.close()


def ppo_checkpoint(folder: Path) -> Path:
    """A CartPole PPO checkpoint after one iteration (sampled in the driver: quick)."""
    config = (PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=0)
              .training(train_batch_size=200, minibatch_size=100, num_epochs=1))
    with config.build() as algo:
        algo.train()
        return Path(algo.save(folder / "checkpoint_000001"))
