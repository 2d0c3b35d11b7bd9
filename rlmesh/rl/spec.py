"""What a model and its action distribution look like, without torch: ``model_config``
defaults and checks, observation widths, and which distribution an action space takes.

Env runners with the default model read only this module and ``numpy_policy``, so they
never import torch; ``models`` and ``distributions`` build the torch side from the same facts.
"""

from __future__ import annotations

import difflib
from typing import Any

import gymnasium as gym
import numpy as np

MODEL_DEFAULTS: dict = {
    "fcnet_hiddens": [256, 256],  # sizes of the hidden layers of each trunk
    "fcnet_activation": "tanh",  # one of ACTIVATION_NAMES
    "vf_share_layers": False,  # True: one trunk feeds both heads (RLlib's default is False)
    "free_log_std": False,  # Box actions: log_std a learned parameter, not a model output
    # Box actions: False samples a Gaussian and clips (or, with normalize_actions, rescales)
    # what it drew into the bounds, as RLlib does; True squashes it with tanh into the
    # bounds, so every action the policy scores is one the env receives (needs finite bounds).
    "squash_actions": False,
    "custom_model": None,  # "package.module:ClassName" of a torch.nn.Module, see build_model
    "custom_model_config": {},  # passed through, untouched, for a custom model's own use
    # Recurrent default model (rl/recurrent.py): encoder -> LSTM -> heads, state per env.
    "use_lstm": False,
    "lstm_cell_size": 256,  # width of the LSTM's hidden and cell state
    "max_seq_len": 20,  # learners train on sequences of at most this many steps
    "lstm_use_prev_action": False,  # the previous action is an input of the LSTM
    "lstm_use_prev_reward": False,  # the previous reward is an input of the LSTM
    # Stack the last k observations (runner-side, restarted each episode) along the last
    # axis; a 2-D (grayscale) observation gains that axis. True is 4, False or 1 none.
    "framestack": False,
}

ACTIVATION_NAMES = ("tanh", "relu", "swish", "linear")

CATEGORICAL, GAUSSIAN, SQUASHED = "categorical", "gaussian", "squashed"


def check_model_config(model_config: dict) -> dict:
    """``model_config`` over the defaults; an unknown key is an error naming the closest."""
    for key in model_config:
        if key not in MODEL_DEFAULTS:
            close = difflib.get_close_matches(key, MODEL_DEFAULTS, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"valid keys: {sorted(MODEL_DEFAULTS)}"
            raise ValueError(f"unknown model_config key {key!r}: {hint}")
    config = {**MODEL_DEFAULTS, **model_config}
    if config["fcnet_activation"] not in ACTIVATION_NAMES:
        raise ValueError(
            f"fcnet_activation {config['fcnet_activation']!r} is not one of {sorted(ACTIVATION_NAMES)}"
        )
    return config


def obs_size(obs_space: gym.Space) -> int:
    """Width of a preprocessed observation: Box ones flattened, Discrete(n) one-hot."""
    if isinstance(obs_space, gym.spaces.Box):
        return int(np.prod(obs_space.shape))
    if isinstance(obs_space, gym.spaces.Discrete):
        return int(obs_space.n)
    raise ValueError(
        f"observation space {obs_space} is not supported by the default model: it takes Box "
        f"and Discrete observations (flatten Dict/Tuple ones with "
        f"gymnasium.wrappers.FlattenObservation, or write a custom_model)"
    )


def action_dist(action_space: gym.Space, squash: bool = False) -> tuple[str, int]:
    """The kind of distribution ``action_space`` takes and how many model outputs
    (distribution inputs) it needs: ``Discrete(n)`` -> categorical over n logits; 1-D
    ``Box`` of d -> a diagonal Gaussian (mean and log_std, 2d inputs), tanh-squashed into
    the bounds with ``squash`` (which needs finite ones)."""
    if isinstance(action_space, gym.spaces.Discrete):
        if int(action_space.start) != 0:
            raise ValueError(
                f"action space {action_space} starts at {action_space.start}; only Discrete "
                f"spaces starting at 0 are supported for now"
            )
        return CATEGORICAL, int(action_space.n)
    if isinstance(action_space, gym.spaces.Box):
        if len(action_space.shape) != 1:
            raise ValueError(
                f"action space {action_space} has shape {action_space.shape}; only 1-D Box "
                f"action spaces are supported for now (flatten the actions in a wrapper)"
            )
        size = 2 * int(action_space.shape[0])
        if not squash:
            return GAUSSIAN, size
        if not (np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))):
            raise ValueError(
                f"squash_actions needs finite bounds, action space {action_space} has infinite "
                f"ones; use squash_actions=False (a Gaussian clipped to the bounds)"
            )
        return SQUASHED, size
    raise ValueError(
        f"action space {action_space} is not supported: rlmesh.rl supports Discrete and 1-D "
        f"Box action spaces (MultiDiscrete, MultiBinary, Tuple and Dict are unsupported for now)"
    )


def clip_actions(actions: np.ndarray, action_space: gym.Space) -> np.ndarray:
    """What the env runner steps the env with: a Box action clipped to the bounds.

    Other spaces pass through. The unclipped action is what gets stored and scored.
    """
    if isinstance(action_space, gym.spaces.Box):
        return np.clip(actions, action_space.low, action_space.high).astype(action_space.dtype, copy=False)
    return actions


def check_observation(space: gym.Space, observation: Any) -> np.ndarray:
    """An observation reported from outside (a policy client) as an array of the space's
    dtype, or a clear error. Box bounds are not enforced (envs report values past them,
    e.g. at a failure); a Discrete observation must be one of its values."""
    arr = np.asarray(observation)
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"observation of dtype {arr.dtype} is not numeric; the observation "
                        f"space is {space}")
    if arr.shape != tuple(space.shape):
        raise ValueError(f"observation of shape {arr.shape}, the observation space is {space} "
                         f"(shape {tuple(space.shape)})")
    obs = arr.astype(space.dtype, copy=False)
    if isinstance(space, gym.spaces.Discrete) and not space.contains(obs):
        raise ValueError(f"observation {observation!r} is outside the observation space {space}")
    return obs


def check_action(space: gym.Space, action: Any, dtype: Any) -> np.ndarray:
    """An action a simulator chose itself (``log_action``) as stored (``dtype``), or a
    clear error when it is outside the action space."""
    stored = np.asarray(action, dtype=dtype)
    if not space.contains(stored.astype(space.dtype)):
        raise ValueError(f"action {action!r} is outside the action space {space}")
    return stored
