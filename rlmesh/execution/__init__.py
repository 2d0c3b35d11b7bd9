"""RLlib's ``ray.rllib.execution`` dataflow operators are not in rlmesh: importing one is one
line naming what to write instead (a ``training_step``, or a plan built from
``rlmesh.algorithms.execution``'s blocks)."""

from __future__ import annotations

from typing import NoReturn


def refuse(name: str, module: str = "rlmesh.execution") -> NoReturn:
    if name.startswith("__"):
        raise AttributeError(name)
    raise ImportError(
        f"{module}.{name}: RLlib's execution operators are not in rlmesh; write the iteration "
        "as training_step (docs/policies.md, examples/a3c_style_ppo.py for A3C's asynchronous "
        "gradients), or an execution_plan from rlmesh.algorithms.execution (parallel_rollouts, "
        "train_one_step)")


def __getattr__(name: str) -> NoReturn:
    refuse(name)
