"""Observation preprocessing in the env runners: the ``framestack`` model option (the last k
observations stacked, restarted each episode) and DeepMind's Atari preprocessing, which an
ALE id gets by default (RLlib's ``preprocessor_pref="deepmind"``) or when
``env_config={"atari": True}`` (or a dict of its settings) asks for it; the model's Atari
keys (``dim``, ``grayscale``, ``zero_mean``, ``framestack``) shape it."""

from __future__ import annotations

from collections import deque
from typing import Any

import gymnasium as gym
import numpy as np

from rlmesh.extras import require

ATARI_DEFAULTS = {
    "frame_skip": 4,  # each action repeated this many frames (max-pooled over the last two)
    "screen_size": 84,  # frames resized to screen_size x screen_size
    "grayscale": True,
    "noop_max": 30,  # up to this many no-op actions after a reset
    "terminal_on_life_loss": False,
    "framestack": 4,  # the last frames stacked along the last axis: (84, 84, 4)
    "zero_mean": False,  # False: uint8 frames (the model scales them to [0, 1]); True:
    # float32 frames in [-1, 1]
    "vector": False,  # True/"ale": ale-py's C++ vector env steps the runner's envs (frames
    # (framestack, H, W)); "envpool": EnvPool's; False: one gymnasium env each, in Python
}

#: How the model's Atari keys (rl/spec.py MODEL_DEFAULTS) name the settings above.
MODEL_ATARI_KEYS = {"dim": "screen_size", "grayscale": "grayscale", "zero_mean": "zero_mean"}


def framestack_size(model_config: dict) -> int:
    """The ``framestack`` model option as a number of frames: True is 4, False or 1 none."""
    value = model_config.get("framestack", False)
    if value is True:
        return 4
    if value is False or value is None:
        return 1
    if isinstance(value, int) and value >= 1:
        return value
    raise ValueError(f"model framestack must be True, False or a number of frames >= 1, "
                     f"got {value!r}")


def stacked_space(space: gym.Space, k: int) -> gym.Box:
    """The observation space of ``k`` stacked observations of the Box ``space``: along the
    last axis, a 2-D (grayscale) observation gaining that axis."""
    if not isinstance(space, gym.spaces.Box):
        raise ValueError(f"framestack stacks Box observations; the observation space is "
                         f"{space} (stack inside the env, or use an LSTM: use_lstm)")
    low, high = space.low, space.high
    if low.ndim == 2:
        low, high = low[..., None], high[..., None]
    return gym.spaces.Box(np.concatenate([low] * k, -1), np.concatenate([high] * k, -1),
                          dtype=space.dtype)


class FrameStack(gym.Wrapper):
    """The last ``k`` observations stacked along the last axis; a reset fills the stack with
    the first observation of the episode, so nothing of the last episode leaks in."""

    def __init__(self, env: gym.Env, k: int) -> None:
        super().__init__(env)
        self.k = k
        self.observation_space = stacked_space(env.observation_space, k)
        self._flat = env.observation_space.shape and len(env.observation_space.shape) == 2
        self.frames: deque[np.ndarray] = deque(maxlen=k)

    def _frame(self, obs: Any) -> np.ndarray:
        obs = np.asarray(obs)
        return obs[..., None] if self._flat else obs

    def _stacked(self) -> np.ndarray:
        return np.concatenate(self.frames, -1)

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict]:
        obs, info = self.env.reset(**kwargs)
        frame = self._frame(obs)
        for _ in range(self.k):
            self.frames.append(frame)
        return self._stacked(), info

    def step(self, action: Any) -> tuple[np.ndarray, Any, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.frames.append(self._frame(obs))
        return self._stacked(), reward, terminated, truncated, info


def wrap_for_model(env: gym.Env, model_config: dict) -> gym.Env:
    """``env`` as the policy sees it: stacked when the model asks for ``framestack``."""
    k = framestack_size(model_config)
    return FrameStack(env, k) if k > 1 else env


def model_obs_space(space: gym.Space, model_config: dict) -> gym.Space:
    """The observation space the policy sees for an env's ``space`` (see wrap_for_model)."""
    k = framestack_size(model_config)
    return stacked_space(space, k) if k > 1 else space


# --- Atari ---

def ale_id(env_id: str) -> bool | None:
    """Whether ``env_id`` is one of ale-py's Atari ids (``ALE/Pong-v5``,
    ``PongNoFrameskip-v4``, ``Pong-v4``), registering ale-py's ids when it looks like one;
    None when it is surely one (``ALE/...``, ``...NoFrameskip``) but ale-py is missing."""
    spec = gym.envs.registry.get(env_id)
    name, _, version = env_id.rpartition("-v")
    surely = env_id.startswith("ALE/") or name.endswith(("NoFrameskip", "Deterministic"))
    if spec is None and (surely or (name[:1].isupper() and version in ("0", "4", "5"))):
        try:
            import ale_py
        except ImportError:
            return None if surely else False
        gym.register_envs(ale_py)  # importing ale_py registered them; this keeps the import
        spec = gym.envs.registry.get(env_id)
    if spec is None and name.endswith("Deterministic"):  # ale-py 0.9 dropped these ids
        base = gym.envs.registry.get(f"{name[:-len('Deterministic')]}-v{version}")
        if base is not None:  # the same game with a fixed frameskip of 4, as they were
            gym.register(env_id, entry_point=base.entry_point, max_episode_steps=
                         base.max_episode_steps, kwargs={**base.kwargs, "frameskip": 4})
            spec = gym.envs.registry.get(env_id)
    return spec is not None and str(spec.entry_point).startswith("ale_py")


def atari_settings(env_config: dict, env_id: str | None = None, model: dict | None = None,
                   preprocessor_pref: str | None = None) -> tuple[dict, dict | None]:
    """``env_config`` without its ``atari`` key, and the Atari settings to preprocess with
    (None: none). ``env_config["atari"]`` decides when present (False: raw frames; True or
    a dict of ATARI_DEFAULTS keys: preprocessed); otherwise an ALE ``env_id`` is
    preprocessed when ``preprocessor_pref`` is ``"deepmind"``, RLlib's default. The model's
    ``dim``/``grayscale``/``zero_mean`` set the frame size, colour and scaling (a key
    given in ``env_config["atari"]`` wins), and a model ``framestack`` above 1 stacks in
    its place (wrap_for_model), so frames are stacked once."""
    env_config = dict(env_config or {})
    asked = env_config.pop("atari", None)
    if asked is None:
        asked = preprocessor_pref == "deepmind" and env_id is not None and bool(ale_id(env_id))
    if not asked:
        return env_config, None
    settings = dict(ATARI_DEFAULTS)
    for key, name in MODEL_ATARI_KEYS.items():
        if model and model.get(key) is not None:
            settings[name] = model[key]
    settings.update(asked if isinstance(asked, dict) else {})
    unknown = set(settings) - set(ATARI_DEFAULTS)
    if unknown:
        raise ValueError(f"env_config atari: unknown settings {sorted(unknown)}; valid: "
                         f"{sorted(ATARI_DEFAULTS)}")
    if model and framestack_size(model) > 1:
        settings["framestack"] = 1
    return env_config, settings


def make_atari(env_id: str, env_config: dict, settings: dict) -> gym.Env:
    """An ALE env preprocessed as DeepMind's DQN and gymnasium's AtariPreprocessing do
    (no-op starts, frame skip with max-pooling, grayscale, resize), its frames stacked:
    (84, 84, 4) of uint8 by default. In numpy: gymnasium's wrapper needs opencv, which
    rlmesh does not depend on."""
    ale_py = require("ale_py", "envs", "Atari preprocessing (ale-py ships the ROMs)")
    gym.register_envs(ale_py)
    check_image_obs(env_config)
    # The wrapper skips frames itself, so the env must not skip too (v5 ids skip 4).
    kwargs = {"frameskip": 1, "obs_type": "grayscale" if settings["grayscale"] else "rgb",
              **env_config}
    env: gym.Env = AtariFrames(gym.make(env_id, **kwargs), settings)
    if settings["zero_mean"]:
        env = ZeroMeanFrames(env)
    k = int(settings["framestack"] or 1)
    return FrameStack(env, k) if k > 1 else env


def check_image_obs(env_config: dict) -> None:
    """One line when env_config asks the emulator for something other than frames."""
    obs_type = env_config.get("obs_type")
    if obs_type not in (None, "rgb", "grayscale"):
        raise ValueError(
            f"env_config obs_type={obs_type!r}: DeepMind's Atari preprocessing and the conv "
            "encoder take image frames; drop obs_type, or set env_config atari False (or "
            "preprocessor_pref None) and an fcnet model to learn from RAM")


class ZeroMeanFrames(gym.ObservationWrapper):
    """uint8 frames as float32 in [-1, 1] (the model's ``zero_mean``)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        shape = env.observation_space.shape
        self.observation_space = gym.spaces.Box(-1.0, 1.0, shape, np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return (observation.astype(np.float32) - 127.5) / 127.5


def area_weights(src: int, dst: int) -> tuple[np.ndarray, np.ndarray]:
    """Which source pixels each of ``dst`` output pixels averages, and their weights (the
    overlap of the pixel with the output's interval: opencv's INTER_AREA along one axis),
    as ``[dst, n]`` index and weight arrays; n is small, so no BLAS call is needed (a
    matrix product through BLAS took 13 ms a frame on a loaded 2-core VM)."""
    edges = np.linspace(0, src, dst + 1)
    width = int(np.ceil(src / dst)) + 1
    index = np.zeros((dst, width), np.int64)
    weight = np.zeros((dst, width), np.float32)
    for i in range(dst):
        lo, hi = edges[i], edges[i + 1]
        for n, j in enumerate(range(int(lo), min(int(np.ceil(hi)), src))):
            index[i, n], weight[i, n] = j, min(hi, j + 1) - max(lo, j)
    return index, weight / weight.sum(1, keepdims=True)


def area_resize(frame: np.ndarray, rows: tuple[np.ndarray, np.ndarray],
                cols: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """``frame`` ``[H, W, ...]`` resized by ``area_weights`` along each axis, as uint8."""
    f = frame.astype(np.float32)
    f = np.einsum("ij...,ij->i...", f[rows[0]], rows[1])  # [h, W, ...]
    f = np.einsum("hij...,ij->hi...", f[:, cols[0]], cols[1])  # [h, w, ...]
    return np.clip(np.rint(f), 0, 255).astype(np.uint8)


class AtariFrames(gym.Wrapper):
    """No-op starts, each action repeated ``frame_skip`` times (rewards summed, the last two
    frames max-pooled against flicker), frames resized to ``screen_size`` square by area
    averaging; optionally the loss of a life ends the episode for the learner."""

    def __init__(self, env: gym.Env, settings: dict) -> None:
        super().__init__(env)
        self.skip, self.noop_max = int(settings["frame_skip"]), int(settings["noop_max"])
        self.life_loss = bool(settings["terminal_on_life_loss"])
        shape = env.observation_space.shape
        size = int(settings["screen_size"])
        self._rows, self._cols = area_weights(shape[0], size), area_weights(shape[1], size)
        self.observation_space = gym.spaces.Box(0, 255, (size, size, *shape[2:]), np.uint8)
        self._lives = 0

    def _resize(self, frame: np.ndarray) -> np.ndarray:
        return area_resize(frame, self._rows, self._cols)

    def _lives_now(self) -> int:
        return int(self.env.unwrapped.ale.lives())

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict]:
        obs, info = self.env.reset(**kwargs)
        for _ in range(int(self.np_random.integers(0, self.noop_max + 1)) if self.noop_max else 0):
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset()
        self._lives = self._lives_now()
        return self._resize(obs), info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        total, frames = 0.0, []
        terminated = truncated = False
        for _ in range(self.skip):
            obs, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            frames = [*frames[-1:], obs]
            if terminated or truncated:
                break
        if self.life_loss:
            lives = self._lives_now()
            terminated = terminated or lives < self._lives
            self._lives = lives
        return self._resize(np.maximum.reduce(frames)), total, terminated, truncated, info
