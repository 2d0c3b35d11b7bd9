"""The RL math the learner and env runners share, free of sockets and processes:
GAE, action distributions, the default actor-critic model, and sample batches.
"""

from rlmesh.rl.batch import Columns, concat_fragments, flatten_time, minibatches, to_tensors
from rlmesh.rl.distributions import (
    Categorical,
    DiagGaussian,
    Distribution,
    SquashedGaussian,
    clip_actions,
    distribution_for,
)
from rlmesh.rl.gae import compute_gae
from rlmesh.rl.models import MODEL_DEFAULTS, ActorCriticMLP, build_model, preprocess_obs

__all__ = [
    "ActorCriticMLP",
    "Categorical",
    "Columns",
    "DiagGaussian",
    "Distribution",
    "MODEL_DEFAULTS",
    "SquashedGaussian",
    "build_model",
    "clip_actions",
    "compute_gae",
    "concat_fragments",
    "distribution_for",
    "flatten_time",
    "minibatches",
    "preprocess_obs",
    "to_tensors",
]
