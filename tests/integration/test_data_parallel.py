"""Data-parallel learners in real processes over gloo on 127.0.0.1: ranks that start from
different seeds and train on different data hold identical weights after every step,
equal to one process averaging their gradients by hand; a dead or hung rank fails the
others within the timeout; a closed group leaves the process ready for the next one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import torch

from rlmesh.rl.optim import Adam
from rlmesh.roles.data_parallel import DataParallel, DataParallelError, free_port

from .data_parallel_worker import LR, batch_for, gradients, loss_for, make_model

WORKER = Path(__file__).with_name("data_parallel_worker.py")
STEPS = 5


def start_ranks(out: Path, world_size: int, **extra) -> list[subprocess.Popen]:
    """``world_size`` worker processes (fresh interpreters, never forked from pytest).
    ``out`` lies in the run root, so conftest's no_orphans check sees them too."""
    address = f"tcp://127.0.0.1:{free_port()}"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = []
    for rank in range(world_size):
        args = {"rank": rank, "world_size": world_size, "address": address, "out": str(out),
                "steps": STEPS, "timeout_s": 10, **extra}
        with open(out / f"rank{rank}.log", "wb") as log:
            procs.append(subprocess.Popen([sys.executable, str(WORKER), json.dumps(args)],
                                          stdout=log, stderr=subprocess.STDOUT, env=env))
    return procs


def stop_all(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()  # SIGKILL also ends a SIGSTOPped process
        p.wait(timeout=10)
    assert not [p.pid for p in procs if psutil.pid_exists(p.pid)
                and psutil.Process(p.pid).status() != psutil.STATUS_ZOMBIE]


def wait_all(procs: list[subprocess.Popen], out: Path, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    for rank, p in enumerate(procs):
        rc = p.wait(timeout=max(0.1, deadline - time.monotonic()))
        assert rc == 0, f"rank {rank} exited {rc}:\n{(out / f'rank{rank}.log').read_text()}"


def load(out: Path, rank: int, step: int | str, what: str = "step") -> dict[str, np.ndarray]:
    """Rank's weights after a step (or "init", before the broadcast), or its gradients."""
    with np.load(out / f"rank{rank}_{step if isinstance(step, str) else f'{what}{step}'}.npz") as f:
        return dict(f)


def hand_averaged_run(init: dict[str, np.ndarray], ranks: list[int]) -> dict[str, list]:
    """One process doing what ``ranks`` do together: the mean of their gradients (zeros
    where a rank's loss leaves a parameter out), then Adam. Per step: the weights, the
    averaged gradients and each rank's loss."""
    model = make_model(seed=0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.from_numpy(init[name]))
    params = list(model.parameters())
    optimizer = Adam(params, lr=LR)
    run: dict[str, list] = {"weights": [], "grads": [], "losses": []}
    for step in range(1, STEPS + 1):
        per_rank, step_losses = [], []
        for rank in ranks:
            optimizer.zero_grad()
            loss = loss_for(model, batch_for(rank, step), rank)
            loss.backward()
            per_rank.append([p.grad for p in params])
            step_losses.append(loss.item())
        for i, p in enumerate(params):
            grads = [g[i] for g in per_rank]
            if all(g is None for g in grads):
                p.grad = None
                continue
            total = torch.zeros_like(p)
            for g in grads:
                total = total if g is None else total + g
            p.grad = total / len(ranks)
        run["grads"].append(gradients(model))
        optimizer.step()
        run["weights"].append({k: v.detach().numpy().copy() for k, v in model.named_parameters()})
        run["losses"].append(step_losses)
    return run


def same_bytes(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(a[k].tobytes() == b[k].tobytes() for k in a)


@pytest.mark.parametrize("world_size", [2, 3])
def test_ranks_hold_identical_weights_equal_to_hand_averaged_gradients(runs_root, world_size):
    out = runs_root / "dp"
    out.mkdir()
    procs = start_ranks(out, world_size)
    try:
        wait_all(procs, out)
    finally:
        stop_all(procs)
    ranks = list(range(world_size))
    # Different seeds, so broadcast_module had something to do.
    assert not same_bytes(load(out, 0, "init"), load(out, 1, "init"))
    for step in range(STEPS + 1):
        for rank in ranks[1:]:
            assert same_bytes(load(out, 0, step), load(out, rank, step)), (rank, step)
            if step:
                assert same_bytes(load(out, 0, step, "grad"), load(out, rank, step, "grad"))
    init = load(out, 0, 0)
    assert same_bytes(init, load(out, 0, "init"))

    expected = hand_averaged_run(init, ranks)
    for step in range(1, STEPS + 1):
        # Gradients too: Adam's step hardly changes if they were summed, not averaged.
        for what, reference in (("step", expected["weights"]), ("grad", expected["grads"])):
            got = load(out, 0, step, what)
            assert got.keys() == reference[step - 1].keys()
            for name, value in got.items():
                np.testing.assert_allclose(value, reference[step - 1][name], rtol=1e-5,
                                           atol=1e-6, err_msg=f"{what} {name}, step {step}")
    # Without averaging each rank would have followed its own data: far outside the
    # tolerance above, so the comparison can fail.
    for rank in ranks:
        alone = hand_averaged_run(init, [rank])["weights"][0]
        gap = max(np.abs(alone[k] - expected["weights"][0][k]).max() for k in alone)
        assert gap > 1e-3, (rank, gap)

    for rank in ranks:
        result = json.loads((out / f"rank{rank}.json").read_text())
        for step, stats in enumerate(result["stats"], 1):
            assert stats["step"] == step and stats["rank"] == np.mean(ranks)
            assert stats["loss"] == pytest.approx(np.mean(expected["losses"][step - 1]), rel=1e-5)
        assert "different keys on different ranks" in result["mismatch"]


# Rank 1 of 2: joins, passes a barrier with rank 0, then dies or stops answering.
PEER = """
import os, signal, sys
from rlmesh.roles.data_parallel import DataParallel
print("imported", flush=True)
with DataParallel(1, 2, sys.argv[1], timeout_s=60) as dp:
    dp.barrier()
    os.kill(os.getpid(), getattr(signal, sys.argv[2]))
"""


@pytest.mark.parametrize("die_signal", ["SIGKILL", "SIGSTOP"])
def test_a_dead_or_hung_rank_fails_the_others_instead_of_hanging(runs_root, die_signal):
    """This process is rank 0; its next collective must raise, at once for a dead peer and
    after timeout_s for a hung one, and leave the process able to form a new group."""
    address = f"tcp://127.0.0.1:{free_port()}"
    log_path = runs_root / "peer.log"  # its path in the peer's argv: no_orphans sees it
    with open(log_path, "wb") as log:
        peer = subprocess.Popen([sys.executable, "-c", PEER, address, die_signal, str(log_path)],
                                stdout=subprocess.PIPE, stderr=log,
                                env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        # The timeout covers the rendezvous too: start it once the peer's imports are
        # done, so a loaded machine's slow torch import does not count against it.
        assert peer.stdout.readline() == b"imported\n", log_path.read_text()
        with DataParallel(0, 2, address, timeout_s=3) as dp:
            dp.barrier()
            params = [torch.nn.Parameter(torch.ones(3))]
            params[0].grad = torch.ones(3)
            started = time.monotonic()
            failed = "rank 0 of 2: all_reduce of gradients failed"
            with pytest.raises(DataParallelError, match=failed):
                dp.average_gradients(params)
            elapsed = time.monotonic() - started
    finally:
        peer.kill()  # SIGKILL also ends a SIGSTOPped process
        peer.wait(timeout=10)
        peer.stdout.close()
    assert not psutil.pid_exists(peer.pid)
    assert elapsed < 3 + 15, elapsed
    with DataParallel(0, 1, f"tcp://127.0.0.1:{free_port()}") as dp:
        assert dp.average_stats({"x": 1.0}) == {"x": 1.0}


def test_groups_form_one_after_another_in_one_process_on_loopback_only():
    me = psutil.Process()

    def listening() -> set:
        return {c.laddr for c in me.net_connections("inet") if c.status == psutil.CONN_LISTEN}

    port = free_port()
    before = listening()
    with pytest.raises(DataParallelError, match="did not all meet"):
        DataParallel(0, 2, f"tcp://127.0.0.1:{port}", timeout_s=1)  # rank 1 never comes
    for _ in range(2):  # the same port again: nothing of the last group lingers
        with DataParallel(0, 1, f"tcp://127.0.0.1:{port}") as dp:
            opened = listening() - before
            assert opened and all(a.ip in ("127.0.0.1", "::1") for a in opened), opened
            with pytest.raises(RuntimeError, match="already exists"):
                DataParallel(0, 1, f"tcp://127.0.0.1:{free_port()}")
            assert dp.average_stats({"b": 2.0, "a": -1.5}) == {"a": -1.5, "b": 2.0}
            dp.barrier()
        dp.close()  # idempotent
        with pytest.raises(DataParallelError, match="after close"):
            dp.barrier()
    assert listening() <= before


def test_single_rank_averaging_keeps_gradients_and_skips_absent_ones():
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))
    model[0](torch.ones(4, 3)).sum().backward()  # model[1] gets no gradient
    expected = [p.grad.clone() for p in model[0].parameters()]
    with DataParallel(0, 1, f"tcp://127.0.0.1:{free_port()}") as dp:
        dp.average_gradients(model.parameters())
    assert all(torch.equal(p.grad, g) for p, g in zip(model[0].parameters(), expected))
    assert all(p.grad is None for p in model[1].parameters())

