"""The device check for machines without a GPU: a CPU learner's work runs with torch's default
device set to ``meta``, so a tensor made without ``device=`` (``torch.tensor(coeff)`` among
statistics on a CUDA learner) fails on the CPU as it would on a GPU.

On by ``RLMESH_CHECK_DEVICES=1`` (``make test`` sets it, so CI checks every learner it runs);
off otherwise, where it costs one dict lookup per update. ``meta`` is stricter than CUDA: a
0-dim CPU tensor mixed into GPU arithmetic is allowed by torch but fails here, which is no
loss, since such a tensor is a host-to-device copy on every step.

The default device is a torch function mode: every torch call goes through Python, and a
checked PPO update took 2.9x as long. So a learner checks its first ``FIRST`` updates (every
path an update always takes) and then every ``EVERY``-th (paths on a schedule: target
networks, KL adaptation), which keeps learning tests' timing close to an unchecked run.
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

import torch

ENV_VAR = "RLMESH_CHECK_DEVICES"
FIRST, EVERY = 3, 20


def enabled() -> bool:
    return os.environ.get(ENV_VAR, "") not in ("", "0")


@contextlib.contextmanager
def learner_scope(device: torch.device, update: int = 0) -> Iterator[None]:
    """Where a learner on ``device`` makes its ``update``-th update (from 0); on the CPU,
    under the check when it is on and the update is one of those checked."""
    if device.type != "cpu" or not enabled() or (update >= FIRST and update % EVERY):
        yield
        return
    try:
        with torch.device("meta"):
            yield
    except (RuntimeError, NotImplementedError) as e:
        if "meta" not in str(e):
            raise
        raise RuntimeError(
            f"{e} ({ENV_VAR} is set: the learner ran with torch's default device 'meta', so "
            "a tensor made without device= in learner, loss or statistics code landed there; "
            "on a GPU learner it would be on the CPU. Make it on the learner's device, e.g. "
            "device=self.device, or report a plain float)") from e
