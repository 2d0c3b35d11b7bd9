"""Where a learner trains (``learner_device``: a GPU round-robin, or the CPU) and how a
batch of host arrays gets there (``to_device``: shared on the CPU, from page-locked memory
to a GPU)."""

from __future__ import annotations

import numpy as np
import torch


def learner_device(num_gpus_per_learner: float, local_rank: int,
                   fake_gpus: bool = False) -> torch.device:
    """Where learner ``local_rank`` on this machine trains.

    With CUDA, learners go round-robin over the visible GPUs, so fractional requests put
    several learners on one device. ``fake_gpus`` (RLlib's ``_fake_gpus``) runs the GPU
    configuration on the CPU, so CI without GPUs exercises multi-learner GPU setups.
    """
    if num_gpus_per_learner < 0:
        raise ValueError(f"num_gpus_per_learner={num_gpus_per_learner} must be >= 0")
    if num_gpus_per_learner == 0:
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    if fake_gpus:
        return torch.device("cpu")
    raise RuntimeError(
        f"num_gpus_per_learner={num_gpus_per_learner:g} was asked for, but no CUDA device is "
        "visible to this process (torch.cuda.is_available() is False); set "
        "num_gpus_per_learner=0 to train on the CPU, or _fake_gpus=True to run the GPU "
        "configuration on the CPU")


def to_device(tensors: dict[str, torch.Tensor | np.ndarray],
              device: torch.device) -> dict[str, torch.Tensor]:
    """A batch of host arrays as tensors on ``device``, dtypes unchanged.

    On the CPU, numpy arrays are shared, not copied, unless torch cannot use their memory
    (read-only views of a receive buffer, negative strides). To a GPU, the copy goes from
    page-locked memory and does not block the host; later work on the current CUDA
    stream is ordered after it.
    """
    out: dict[str, torch.Tensor] = {}
    for key, value in tensors.items():
        t = value if isinstance(value, torch.Tensor) else _from_numpy(value)
        if device.type == "cuda":
            if t.device.type == "cpu":
                t = t.pin_memory()
            t = t.to(device, non_blocking=True)
        else:
            t = t.to(device)
        out[key] = t
    return out


def _from_numpy(array: np.ndarray) -> torch.Tensor:
    array = np.asarray(array)
    if not array.flags.writeable or any(s < 0 for s in array.strides):
        array = array.copy()
    return torch.from_numpy(array)
