"""The device check for machines without a GPU: a CPU learner's work runs with torch's default
device set to ``meta``, so a tensor made without ``device=`` (``torch.tensor(coeff)`` among
statistics on a CUDA learner) fails on the CPU as it would on a GPU.

On by ``RLMESH_CHECK_DEVICES=1`` (``make test`` sets it, so CI checks every learner it runs);
off otherwise, where it costs one dict lookup per update. ``meta`` is stricter than CUDA: a
0-dim CPU tensor mixed into GPU arithmetic is allowed by torch but fails here, which is no
loss, since such a tensor is a host-to-device copy on every step.
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

import torch

ENV_VAR = "RLMESH_CHECK_DEVICES"


def enabled() -> bool:
    return os.environ.get(ENV_VAR, "") not in ("", "0")


@contextlib.contextmanager
def learner_scope(device: torch.device) -> Iterator[None]:
    """Where a learner on ``device`` updates; on the CPU, under the check when it is on."""
    if device.type != "cpu" or not enabled():
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
