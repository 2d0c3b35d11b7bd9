"""One data-parallel learner rank for tests/integration/test_data_parallel.py: trains the
default model on its own data for a few steps and writes its weights after each step.

Run as ``python data_parallel_worker.py '<json args>'``; the test imports ``make_model``,
``batch_for`` and ``loss_for`` to compute the same steps by hand.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from rlmesh.rl.default_model import build_model
from rlmesh.rl.optim import Adam

MODEL_CONFIG = {"fcnet_hiddens": [16, 16], "fcnet_activation": "tanh", "vf_share_layers": False}
LR = 0.01


def make_model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = build_model(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), MODEL_CONFIG)
    # A parameter no loss touches on any rank: it must keep grad=None after averaging.
    model.register_parameter("unused", torch.nn.Parameter(torch.zeros(3)))
    return model


def batch_for(rank: int, step: int) -> torch.Tensor:
    return torch.randn(8, 4, generator=torch.Generator().manual_seed(1000 * rank + step))


def loss_for(model: torch.nn.Module, obs: torch.Tensor, rank: int) -> torch.Tensor:
    """Odd ranks leave the value branch out, so its parameters have grad=None there."""
    logits, value = model(obs)
    loss = logits.pow(2).mean()
    return loss if rank % 2 else loss + value.pow(2).mean()


def snapshot(model: torch.nn.Module) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy().copy() for k, v in model.named_parameters()}


def gradients(model: torch.nn.Module) -> dict[str, np.ndarray]:
    return {k: v.grad.numpy().copy() for k, v in model.named_parameters() if v.grad is not None}


def main(args: dict) -> None:
    from rlmesh.roles.data_parallel import DataParallel, DataParallelError

    torch.set_num_threads(1)
    rank, out = args["rank"], Path(args["out"])
    model = make_model(seed=rank)
    np.savez(out / f"rank{rank}_init.npz", **snapshot(model))
    started = time.monotonic()
    with DataParallel(rank, args["world_size"], args["address"], timeout_s=args["timeout_s"]) as dp:
        init_s = time.monotonic() - started
        dp.broadcast_module(model)
        np.savez(out / f"rank{rank}_step0.npz", **snapshot(model))
        optimizer = Adam(model.parameters(), lr=LR)
        stats = []
        for step in range(1, args["steps"] + 1):
            loss = loss_for(model, batch_for(rank, step), rank)
            optimizer.zero_grad()
            loss.backward()
            if step == args.get("die_at") and rank == args.get("die_rank"):
                os.kill(os.getpid(), getattr(signal, args.get("die_signal", "SIGKILL")))
            dp.average_gradients(model.parameters())
            assert model.unused.grad is None
            np.savez(out / f"rank{rank}_grad{step}.npz", **gradients(model))
            optimizer.step()
            np.savez(out / f"rank{rank}_step{step}.npz", **snapshot(model))
            mine = {"loss": loss.item(), "rank": float(rank), "step": float(step)}
            stats.append(dp.average_stats(mine))
        try:  # keys that differ by rank must raise, not average unrelated numbers
            dp.average_stats({f"only_on_rank_{rank}": 1.0})
            mismatch = "no error"
        except DataParallelError as e:
            mismatch = str(e)
        dp.barrier()
    result = {"stats": stats, "init_s": init_s, "mismatch": mismatch}
    (out / f"rank{rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
