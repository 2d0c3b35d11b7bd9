"""The device check for machines without a GPU: while a CPU learner updates, a tensor that
rlmesh's (or the user's) learner, loss or statistics code makes with a factory
(``torch.tensor``, ``zeros``, ``as_tensor``, ``arange`` ...) without ``device=`` raises
``DeviceCheckError`` naming the file and line. On a CUDA learner such a tensor lands on the
CPU beside CUDA ones (``torch.tensor(coeff)`` among IMPALA's statistics crashed every IMPALA,
APPO and A2C run on a GPU); on the CPU alone nothing shows it, so CI has no other way to see it.

On by ``RLMESH_CHECK_DEVICES=1`` (``make test`` sets it, so CI checks every learner it runs);
off otherwise, where it costs one dict lookup per update. Calls made inside torch itself
(``torch.optim``, ``nn.functional``) are left alone: they choose their devices on purpose.
The check never changes what is computed: a call it lets through runs as it would without
it. (A first version set torch's default device to ``meta`` instead; torch's fused CPU Adam
kernel, given a step count made on ``meta``, then silently skipped the update.)

The check is a torch function mode, so every torch call of a checked update goes through
Python (a checked PPO update took 2.9x as long). A learner checks its first ``FIRST``
updates (every path an update always takes) and then every ``EVERY``-th (paths on a
schedule: target networks, KL adaptation), which keeps learning tests' timing close to an
unchecked run.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from pathlib import Path
from typing import Any, Iterator

import torch
from torch.overrides import TorchFunctionMode

ENV_VAR = "RLMESH_CHECK_DEVICES"
FIRST, EVERY = 3, 20
_TORCH_DIR = str(Path(torch.__file__).parent)


class DeviceCheckError(RuntimeError):
    """A tensor made without ``device=`` during a checked learner update."""


def enabled() -> bool:
    return os.environ.get(ENV_VAR, "") not in ("", "0")


@functools.cache
def _factories() -> frozenset:
    from torch.utils._device import _device_constructors

    return frozenset(_device_constructors())


class _NoImplicitDevice(TorchFunctionMode):
    def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if kwargs.get("device") is None and func in _factories():
            caller = sys._getframe(1)
            if not caller.f_code.co_filename.startswith(_TORCH_DIR):
                raise DeviceCheckError(
                    f"torch.{func.__name__}(...) without device= at "
                    f"{caller.f_code.co_filename}:{caller.f_lineno}, in a learner's update "
                    f"({ENV_VAR} is set): on a GPU learner this tensor would sit on the CPU "
                    "beside CUDA ones. Make it on the learner's device (device=self.device), "
                    "say device='cpu' where the CPU is meant, or report a plain float")
        return func(*args, **kwargs)


@contextlib.contextmanager
def learner_scope(device: torch.device, update: int = 0) -> Iterator[None]:
    """Where a learner on ``device`` makes its ``update``-th update (from 0); on the CPU,
    under the check when it is on and the update is one of those checked."""
    if device.type != "cpu" or not enabled() or (update >= FIRST and update % EVERY):
        yield
        return
    with _NoImplicitDevice():
        yield
