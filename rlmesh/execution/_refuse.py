"""The one-line refusal of RLlib's execution operators rlmesh does not have (the
concurrency, replay, learner-thread and tree-aggregation ones): what to write instead."""

from __future__ import annotations

from typing import NoReturn


def refuse(name: str, module: str = "rlmesh.execution") -> NoReturn:
    """``from module import name`` of an operator rlmesh does not build: one ImportError line."""
    if name.startswith("__"):
        raise AttributeError(name)
    raise ImportError(
        f"{module}.{name}: this RLlib execution operator is not in rlmesh; write the iteration "
        "as training_step (docs/policies.md; examples/a3c_style_ppo.py for asynchronous "
        "gradients), or a plan of ParallelRollouts, ConcatBatches, SelectExperiences, "
        "StandardizeFields, AsyncGradients, TrainOneStep, ApplyGradients and "
        "StandardMetricsReporting (rlmesh.execution)")
