"""RLlib's ``ray.rllib.execution``: the dataflow operators of the Trainer-era execution plans
that rlmesh builds on its own sampling, learners and results (``rollout_ops``, ``train_ops``,
``metric_ops``, ``LocalIterator``); every other operator is one line naming what to write."""

from __future__ import annotations

import importlib
from typing import Any

from rlmesh.execution._refuse import refuse

# Name -> its module below rlmesh.execution (RLlib's package exported them all).
_BUILT = {
    "ParallelRollouts": "rollout_ops", "ConcatBatches": "rollout_ops",
    "SelectExperiences": "rollout_ops", "StandardizeFields": "rollout_ops",
    "AsyncGradients": "rollout_ops", "TrainOneStep": "train_ops", "ApplyGradients": "train_ops",
    "TrainTFMultiGPU": "train_ops", "UpdateTargetNetwork": "train_ops",
    "StandardMetricsReporting": "metric_ops", "LocalIterator": "local_iterator",
}


# Its modules, for ``from rlmesh.execution import rollout_ops`` before they are imported.
_MODULES = ("common", "concurrency_ops", "learner_thread", "local_iterator", "metric_ops",
            "multi_gpu_learner_thread", "replay_ops", "rollout_ops", "train_ops", "tree_agg")


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in _BUILT:
        return getattr(importlib.import_module(f"{__name__}.{_BUILT[name]}"), name)
    refuse(name)


__all__ = sorted(_BUILT)
