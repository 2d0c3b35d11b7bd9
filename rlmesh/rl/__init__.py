"""The RL math the learner and env runners share, free of sockets and processes:
sample columns, GAE, action distributions, the default actor-critic model, batches.

Names load on first use: an env runner with the default model imports only ``spec`` and
``numpy_policy``, and must not pay for torch because this package was imported.
"""

import importlib

_EXPORTS = {
    "Columns": "columns", "ColumnSpec": "columns", "SampleBatch": "columns",
    "DEFAULT_POLICY_ID": "columns", "merge_fragments": "columns",
    "minibatches": "batch", "to_tensors": "batch",
    "Categorical": "distributions", "DiagGaussian": "distributions",
    "Distribution": "distributions", "SquashedGaussian": "distributions",
    "MultiCategorical": "distributions", "Bernoulli": "distributions", "Joint": "distributions",
    "clip_actions": "spec", "distribution_for": "distributions",
    "compute_gae": "gae",  # vtrace: import rlmesh.rl.vtrace (its module has the name)
    "ActorCriticMLP": "default_model", "build_model": "default_model",
    "preprocess_obs": "default_model",
    "MODEL_DEFAULTS": "spec", "NumpyPolicy": "numpy_policy",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'rlmesh.rl' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"rlmesh.rl.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value
