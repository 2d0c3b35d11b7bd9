"""Sweeps: search spaces in config values, trials placed by the cluster's scheduler and run
side by side, Optuna search and pruning, population based training, resumable experiments.
Heavy parts load when first used, so ``import rlmesh.tune`` stays light."""

from __future__ import annotations

from typing import Any

from rlmesh.tune.spaces import (choice, grid_search, loguniform, quniform, randint, sample_from,
                                uniform)

_LAZY = {"report": "rlmesh.tune.executor", "get_checkpoint": "rlmesh.tune.executor",
         "get_trial_dir": "rlmesh.tune.executor", "run": "rlmesh.tune.api", "Tuner": "rlmesh.tune.api", "TuneConfig": "rlmesh.tune.api",
         "RunConfig": "rlmesh.tune.api", "ExperimentAnalysis": "rlmesh.tune.analysis",
         "PopulationBasedTraining": "rlmesh.tune.pbt", "TuneError": "rlmesh.tune.legacy",
         "function": "rlmesh.tune.legacy"}

__all__ = ["choice", "grid_search", "loguniform", "quniform", "randint", "sample_from", "uniform",
           *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'rlmesh.tune' has no attribute {name!r}")
