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
    # The trunk: dense layers over the encoded observation (the concatenation of every
    # leaf's encoding, see docs/models.md), one for the policy and one for the value.
    "fcnet_hiddens": [256, 256],  # sizes of the hidden layers of each trunk
    "fcnet_activation": "tanh",  # one of ACTIVATION_NAMES
    # Image leaves (Box of 3 dims, HWC or CHW; 2-dim uint8 ones as one channel) go through
    # a conv stack first: [[out_channels, kernel, stride], ...], kernel an int or [kh, kw],
    # no padding. None: a default chosen from the image size (default_conv_filters).
    "conv_filters": None,
    "conv_activation": "relu",  # one of ACTIVATION_NAMES
    "post_fcnet_hiddens": [],  # more dense layers after fcnet_hiddens (RLlib's final stack)
    "vf_share_layers": False,  # True: one trunk feeds both heads (RLlib's default is False)
    "free_log_std": False,  # Box actions: log_std a learned parameter, not a model output
    # free_log_std's starting value (SB3's log_std_init; rl-zoo's MuJoCo PPO starts at -2).
    "log_std_init": 0.0,
    # Box actions: False samples a Gaussian and clips (or, with normalize_actions, rescales)
    # what it drew into the bounds, as RLlib does; True squashes it with tanh into the
    # bounds, so every action the policy scores is one the env receives (needs finite bounds).
    "squash_actions": False,
    # A torch.nn.Module subclass, its import path "package.module:ClassName", or a name
    # given to rlmesh.models.register_custom_model; the contract: docs/models.md.
    "custom_model": None,
    "custom_model_config": {},  # passed through, untouched, for a custom model's own use
    # Recurrent default model (rl/lstm_model.py): the encoder above -> fcnet_hiddens then
    # post_fcnet_hiddens -> LSTM -> heads, its state carried per env (docs/models.md).
    "use_lstm": False,
    "lstm_cell_size": 256,  # width of the LSTM's hidden and cell state
    "max_seq_len": 20,  # learners train on sequences of at most this many steps
    "lstm_use_prev_action": False,  # the previous action is an input of the LSTM
    "lstm_use_prev_reward": False,  # the previous reward is an input of the LSTM
    # Stack the last k observations (runner-side, restarted each episode) along the last
    # axis; a 2-D (grayscale) observation gains that axis. True is 4, False or 1 none.
    # An ALE id's Atari preprocessing stacks 4 frames itself unless this is above 1.
    "framestack": False,
    # Atari: how an ALE id's DeepMind preprocessing shapes frames (rlmesh/preprocessing.py;
    # RLlib's Atari keys; other envs ignore them): resized to dim x dim, grayscale (False:
    # RGB), and zero_mean True: float32 frames in [-1, 1], False: uint8 frames the model
    # scales to [0, 1]. RLlib's defaults for the last two (False, True) went unused by its
    # "deepmind" wrappers, which are grayscale uint8, as these defaults are.
    "dim": 84,
    "grayscale": True,
    "zero_mean": False,
}

ACTIVATION_NAMES = ("tanh", "relu", "swish", "linear")

CATEGORICAL, GAUSSIAN, SQUASHED = "categorical", "gaussian", "squashed"
MULTI_CATEGORICAL, BERNOULLI, JOINT = "multi_categorical", "bernoulli", "joint"

#: The observation key whose value masks the invalid actions of a Discrete/MultiDiscrete space.
ACTION_MASK = "action_mask"

#: Custom models by name (register_custom_model): the import path other processes load.
CUSTOM_MODELS: dict[str, str] = {}


#: RLlib model keys rlmesh has no counterpart for, and what to do instead.
RLLIB_MODEL_HINTS: dict[str, str] = {
    "use_attention": "rlmesh has no attention net; use_lstm gives the model memory "
                     "(docs/observations_and_memory.md)",
    "lstm_use_prev_action_reward": "RLlib's old name: set lstm_use_prev_action and "
                                   "lstm_use_prev_reward",
    "_time_major": "remove it: learners lay sequences out themselves",
}


def check_model_config(model_config: dict) -> dict:
    """``model_config`` over the defaults; an unknown key is an error naming the closest."""
    for key in model_config:
        if key in RLLIB_MODEL_HINTS or key.startswith("attention_"):
            hint = RLLIB_MODEL_HINTS.get(key, RLLIB_MODEL_HINTS["use_attention"])
            raise ValueError(f"key {key!r} is RLlib's, not rlmesh's: {hint}")
        if key not in MODEL_DEFAULTS:
            close = difflib.get_close_matches(key, MODEL_DEFAULTS, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"valid keys: {sorted(MODEL_DEFAULTS)}"
            raise ValueError(f"unknown model_config key {key!r}: {hint}")
    config = {**MODEL_DEFAULTS, **model_config}
    for key in ("fcnet_activation", "conv_activation"):
        if config[key] not in ACTIVATION_NAMES:
            raise ValueError(f"{key} {config[key]!r} is not one of {sorted(ACTIVATION_NAMES)}")
    if config["conv_filters"] is not None:
        conv_filters(config["conv_filters"])  # raises on a malformed one
    if isinstance(config["dim"], bool) or not isinstance(config["dim"], int) or config["dim"] < 1:
        raise ValueError(f"model dim (the Atari frame size) must be an int >= 1, "
                         f"got {config['dim']!r}")
    for key in ("grayscale", "zero_mean", "vf_share_layers", "free_log_std", "squash_actions",
                "use_lstm", "lstm_use_prev_action", "lstm_use_prev_reward"):
        if not isinstance(config[key], bool):
            raise ValueError(f"model {key} must be True or False, got {config[key]!r}")
    # Checked here, not where torch builds the layers: '"64"' for [64] used to end in a
    # 40-line torch traceback from a learner process.
    for key in ("fcnet_hiddens", "post_fcnet_hiddens"):
        sizes = config[key]
        if not isinstance(sizes, (list, tuple)) or not all(_is_size(n) for n in sizes):
            raise ValueError(f"model {key} must be a list of layer sizes (ints >= 1), e.g. "
                             f"[64, 64], got {sizes!r}")
    for key in ("lstm_cell_size", "max_seq_len"):
        if not _is_size(config[key]):
            raise ValueError(f"model {key} must be an int >= 1, got {config[key]!r}")
    if config["use_lstm"] and config["custom_model"] is not None:
        raise ValueError(f"use_lstm wraps the default model, and custom_model "
                         f"{config['custom_model']!r} replaces it: drop use_lstm, or the "
                         f"custom_model (which keeps its own recurrent state, docs/models.md)")
    framestack = config["framestack"]
    if not isinstance(framestack, bool) and not _is_size(framestack):
        raise ValueError(f"model framestack must be True, False or an int >= 1, got {framestack!r}")
    log_std_init = config["log_std_init"]
    if isinstance(log_std_init, bool) or not isinstance(log_std_init, (int, float)):
        raise ValueError(f"model log_std_init must be a number, got {config['log_std_init']!r}")
    if not isinstance(config["custom_model_config"], dict):
        raise ValueError(f"model custom_model_config must be a dict, got "
                         f"{config['custom_model_config']!r}")
    return config


def _is_size(n: Any) -> bool:
    return isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 1


def custom_model_path(value: Any) -> Any:
    """``custom_model`` as other processes find it: a registered name or a class becomes
    its import path; a path (or None) is kept."""
    if value is None:
        return None
    if isinstance(value, str):
        return CUSTOM_MODELS.get(value, value)
    if isinstance(value, type):
        from rlmesh.runtime.import_path import path_of

        return path_of(value, "custom_model")
    raise ValueError(f"custom_model must be a torch.nn.Module subclass, its import path "
                     f"'package.module:ClassName' or a registered name, got {value!r}")


def conv_filters(filters: Any) -> list[tuple[int, tuple[int, int], int]]:
    """``[[out_channels, kernel, stride], ...]`` checked, kernels as ``(kh, kw)``."""
    out = []
    try:
        for channels, kernel, stride in filters:
            kh, kw = (kernel, kernel) if isinstance(kernel, int) else tuple(kernel)
            out.append((int(channels), (int(kh), int(kw)), int(stride)))
    except (TypeError, ValueError):
        raise ValueError(f"conv_filters must be [[out_channels, kernel, stride], ...] with "
                         f"kernel an int or [kh, kw], got {filters!r}") from None
    return out


def image_shape(space: gym.Space) -> tuple[int, int, int] | None:
    """``(channels, height, width)`` of an image leaf (a Box of 3 dims, channels last unless
    the first dim is the smaller one and at most 16, as a frame stack of (4, 84, 84); a
    uint8 Box of 2 dims is one channel); None for anything else."""
    if not isinstance(space, gym.spaces.Box):
        return None
    shape = tuple(space.shape)
    if len(shape) == 2 and space.dtype == np.uint8:
        return (1, *shape)
    if len(shape) != 3:
        return None
    if shape[0] < shape[-1] and shape[0] <= 16:
        return shape
    return (shape[2], shape[0], shape[1])


def has_image(space: gym.Space) -> bool:
    """Whether ``space`` is, or holds in a Dict or Tuple, an image leaf (``image_shape``):
    what the default model reads with a conv net."""
    if isinstance(space, gym.spaces.Dict):
        return any(has_image(s) for s in space.spaces.values())
    if isinstance(space, gym.spaces.Tuple):
        return any(has_image(s) for s in space.spaces)
    return image_shape(space) is not None


def default_conv_filters(space: gym.Space) -> list:
    """Conv filters for an image of this size: the Nature DQN stack from 64 pixels up
    (84x84, 64x64), a smaller one for 42x42, two 3x3 layers for small grids (MinAtar's
    10x10, MiniGrid's 7x7, down to 5x5)."""
    _, h, w = image_shape(space)
    side = min(h, w)
    if side >= 64:
        return [[32, [8, 8], 4], [64, [4, 4], 2], [64, [3, 3], 1]]
    if 36 <= side < 64:
        return [[16, [4, 4], 2], [32, [4, 4], 2], [32, [3, 3], 1]]
    if 5 <= side <= 16:
        return [[16, [3, 3], 1], [32, [3, 3], 1]]
    raise ValueError(f"no default conv_filters for an image of shape {tuple(space.shape)} "
                     f"(defaults cover 5x5 to 16x16 grids, 42x42, 64x64 and up): set model "
                     f"conv_filters=[[out_channels, kernel, stride], ...] or a custom_model")


def numpy_fast_path(obs_space: gym.Space, action_space: gym.Space, model_config: dict) -> bool:
    """Whether runners act with the numpy MLP (``numpy_policy``): the default model on a
    flat observation (a Box that is not an image, or a Discrete) with Discrete or Box
    actions; everything else (conv, nested spaces, custom or recurrent models) runs torch.
    ``obs_space`` is the one the policy sees: with ``framestack``, the stacked one."""
    config = {**MODEL_DEFAULTS, **model_config}
    if config["custom_model"] is not None or config["use_lstm"]:
        return False
    flat_obs = (isinstance(obs_space, gym.spaces.Discrete)
                or (isinstance(obs_space, gym.spaces.Box) and image_shape(obs_space) is None))
    flat_actions = (isinstance(action_space, gym.spaces.Discrete)
                    or (isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1))
    return flat_obs and flat_actions


def obs_size(obs_space: gym.Space) -> int:
    """Width of a flat observation as the MLP reads it: Box ones flattened, Discrete(n)
    one-hot (other spaces go through the encoders of ``rl/encoders.py``)."""
    if isinstance(obs_space, gym.spaces.Box):
        return int(np.prod(obs_space.shape))
    if isinstance(obs_space, gym.spaces.Discrete):
        return int(obs_space.n)
    raise ValueError(f"observation space {obs_space} is not flat (Box or Discrete)")


def action_dist(action_space: gym.Space, squash: bool = False) -> tuple[str, int]:
    """The kind of distribution ``action_space`` takes and how many model outputs
    (distribution inputs) it needs: ``Discrete(n)`` -> categorical over n logits;
    ``MultiDiscrete`` -> one categorical per entry (sum of nvec logits); ``MultiBinary(n)``
    -> n Bernoulli logits; a ``Box`` of d values (any shape) -> a diagonal Gaussian (mean
    and log_std, 2d inputs), tanh-squashed into the bounds with ``squash`` (which needs
    finite ones); ``Tuple``/``Dict`` -> a joint distribution, one per leaf, side by side."""
    if isinstance(action_space, gym.spaces.Discrete):
        if int(action_space.start) != 0:
            raise ValueError(
                f"action space {action_space} starts at {action_space.start}; only Discrete "
                f"spaces starting at 0 are supported for now"
            )
        return CATEGORICAL, int(action_space.n)
    if isinstance(action_space, gym.spaces.MultiDiscrete):
        if np.asarray(action_space.start).any():
            raise ValueError(f"action space {action_space} has a nonzero start; only "
                             f"MultiDiscrete spaces starting at 0 are supported for now")
        return MULTI_CATEGORICAL, int(np.sum(action_space.nvec))
    if isinstance(action_space, gym.spaces.MultiBinary):
        return BERNOULLI, int(np.prod(action_space.shape))
    if isinstance(action_space, gym.spaces.Box):
        size = 2 * int(np.prod(action_space.shape))
        if not squash:
            return GAUSSIAN, size
        if not (np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))):
            raise ValueError(
                f"squash_actions needs finite bounds, action space {action_space} has infinite "
                f"ones; use squash_actions=False (a Gaussian clipped to the bounds)"
            )
        return SQUASHED, size
    if isinstance(action_space, (gym.spaces.Tuple, gym.spaces.Dict)):
        from rlmesh.rl.nested_spaces import leaves

        try:
            return JOINT, sum(action_dist(leaf.space, squash)[1] for leaf in leaves(action_space))
        except ValueError as e:
            raise ValueError(f"action space {action_space}: {e}") from None
    raise ValueError(
        f"action space {action_space} is not supported: rlmesh.rl supports Discrete, "
        f"MultiDiscrete, MultiBinary, Box and Tuple/Dict of them"
    )


def clip_actions(actions: np.ndarray, action_space: gym.Space) -> np.ndarray:
    """What the env runner steps the env with: a Box action clipped to the bounds.

    Other spaces pass through. The unclipped action is what gets stored and scored.
    """
    if isinstance(action_space, gym.spaces.Box):
        return np.clip(actions, action_space.low, action_space.high).astype(action_space.dtype, copy=False)
    return actions


def check_observation(space: gym.Space, observation: Any) -> np.ndarray:
    """An observation reported from outside (a policy client) as its column stores it (a
    packed record for Tuple/Dict spaces), or one clear error naming the key, the expected
    and the received shape and dtype. Box bounds are not enforced (envs report values past
    them, e.g. at a failure); a Discrete observation must be one of its values."""
    from rlmesh.rl.nested_spaces import to_column

    obs = to_column(space, observation)
    if isinstance(space, gym.spaces.Discrete) and not space.contains(obs):
        raise ValueError(f"observation {observation!r} is outside the observation space {space}")
    return obs


def check_action(space: gym.Space, action: Any, dtype: Any) -> np.ndarray:
    """An action a simulator chose itself (``log_action``) as stored (``dtype``), or a
    clear error when it is outside the action space."""
    from rlmesh.rl.nested_spaces import is_nested, to_column

    if is_nested(space):
        if not space.contains(action):
            raise ValueError(f"action {action!r} is outside the action space {space}")
        return to_column(space, action, "action")
    stored = np.asarray(action, dtype=dtype)
    if not space.contains(stored.astype(space.dtype)):
        raise ValueError(f"action {action!r} is outside the action space {space}")
    return stored
