"""Whether the learners a config asks for can get their GPUs on this machine, checked (one
line) before any process starts."""

from __future__ import annotations

import math

from rlmesh.config.settings import ConfigError


def check_learner_gpus(num_learners: int, num_gpus_per_learner: float, fake_gpus: bool = False,
                       visible: int | None = None) -> None:
    """ConfigError (one line, before any process starts) for learners that cannot get the
    GPUs they ask for on this machine: no CUDA, more learners than GPUs, a fraction that
    does not divide a GPU evenly, or more than one GPU per learner (a learner trains on one
    device). ``visible``: the GPU count (default: torch's). A cluster run (``rlmesh launch``)
    is placed by the launcher's scheduler over its nodes' GPUs instead."""
    import torch

    from rlmesh.runtime.job import jobs_are_local

    g = num_gpus_per_learner
    if g == 0:
        return
    if g > 1:
        raise ConfigError(f"num_gpus_per_learner={g:g}: a learner trains on one GPU; for more "
                          "GPUs, set num_learners (data-parallel learners, a GPU each)")
    if g < 1 and abs(1 / g - round(1 / g)) > 1e-6:
        raise ConfigError(f"num_gpus_per_learner={g:g} does not divide a GPU evenly; use 1/k "
                          "(0.5, 0.25, ...) so that k learners share each GPU")
    if fake_gpus or not jobs_are_local():
        return
    visible = torch.cuda.device_count() if visible is None else visible
    n = max(1, num_learners)
    if visible == 0:
        raise ConfigError(
            f"num_gpus_per_learner={g:g} was asked for, but no CUDA device is visible here "
            "(torch.cuda.is_available() is False); set num_gpus_per_learner=0 to train on the "
            "CPU, or _fake_gpus=True to run the GPU configuration on the CPU")
    needed = math.ceil(n * g - 1e-6)
    if needed > visible:
        raise ConfigError(f"num_learners={n} x num_gpus_per_learner={g:g} needs {needed} GPUs; "
                          f"this machine has {visible}. Lower num_learners, or share GPUs "
                          f"(num_gpus_per_learner=1/k)")
