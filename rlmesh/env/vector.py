"""Atari as a C++ vector env: ale-py's ``AtariVectorEnv`` (threads inside the runner,
DeepMind's preprocessing done in C++) or EnvPool's, asked for with
``env_config={"atari": {"vector": True}}`` (or ``"envpool"``). Frames are uint8
``(stack, H, W)`` from the emulator to the loss; docs/atari.md says where each copy is made.
``VectorAsEnv`` gives one such env the gymnasium single-env interface, for the driver's
probe, evaluation and ``rlmesh rollout``."""

from __future__ import annotations

import os
from typing import Any, Callable

import gymnasium as gym
import numpy as np

from rlmesh.extras import require

#: What env_config may pass through to the vector env besides the Atari settings, with
#: the id's own values (sticky actions on v5 ids, the frame cap) as defaults.
VECTOR_ENV_KEYS = ("repeat_action_probability", "full_action_space",
                   "max_num_frames_per_episode", "num_threads", "use_fire_reset")
VECTOR_BACKENDS = (True, "ale", "envpool")


class VectorEnvError(ValueError):
    """A vector env asked for with settings it cannot take."""


def vector_backend(settings: dict | None) -> str | None:
    """"ale" or "envpool" when the Atari ``settings`` ask for a vector env, else None."""
    asked = (settings or {}).get("vector", False)
    if asked is False or asked is None:
        return None
    if asked not in VECTOR_BACKENDS:
        raise VectorEnvError(f"env_config atari vector: {asked!r}; valid: False, True "
                             f"(ale-py's vector env), 'ale', 'envpool'")
    return "envpool" if asked == "envpool" else "ale"


def _game_and_defaults(env_id: str) -> tuple[str, dict[str, Any]]:
    """The ROM name of an ALE id and the id's own settings (sticky actions, frame cap)."""
    from rlmesh.preprocessing import ale_id

    ale_id(env_id)  # registers ale-py's ids on first use
    spec = gym.envs.registry.get(env_id)
    if spec is None or not str(spec.entry_point).startswith("ale_py"):
        raise VectorEnvError(f"env_config atari vector: {env_id!r} is not an ALE id "
                             "(ALE/Pong-v5, PongNoFrameskip-v4); the vector backend runs Atari "
                             "games only: set vector False for other envs")
    kwargs = dict(spec.kwargs)
    return kwargs["game"], {k: kwargs[k] for k in VECTOR_ENV_KEYS if k in kwargs}


def _check(env_config: dict, settings: dict) -> dict[str, Any]:
    """The env_config keys the vector env takes; one line naming any it cannot."""
    rest = dict(env_config)
    # RLlib's Atari files pass frameskip 1 so that its wrapper skips; here the vector env
    # skips (atari frame_skip), so 1 means the same and anything else is refused.
    if rest.get("frameskip", 1) != 1:
        raise VectorEnvError(f"env_config frameskip={rest['frameskip']!r}: with the vector env "
                             "set atari frame_skip instead (frameskip 1 is taken, as RLlib's "
                             "Atari files pass it)")
    rest.pop("frameskip", None)
    obs_type = rest.pop("obs_type", None)
    if obs_type not in (None, "rgb", "grayscale"):
        raise VectorEnvError(
            f"env_config obs_type={obs_type!r}: the Atari vector env and the conv encoder take "
            "image frames only; drop obs_type (grayscale frames: atari grayscale True) or set "
            "env_config atari False and use an fcnet model on RAM")
    unknown = sorted(set(rest) - set(VECTOR_ENV_KEYS))
    if unknown:
        raise VectorEnvError(f"env_config {unknown}: not a setting of the Atari vector env; "
                             f"valid: {list(VECTOR_ENV_KEYS)} and the atari settings")
    if settings["zero_mean"]:
        raise VectorEnvError("atari zero_mean with vector: the vector env gives uint8 frames "
                             "and the conv encoder scales them; set zero_mean False")
    return rest


def make_vector_env(env_id: str, env_config: dict, settings: dict, num_envs: int,
                    num_threads: int | None = None) -> Any:
    """``num_envs`` games of ``env_id`` stepped by C++ threads, rewards unclipped (the
    runner clips by ``clip_rewards`` and reports raw returns), episodes reset in the same
    step that ends them (gymnasium's SAME_STEP: the last frame in ``info["final_obs"]``)."""
    backend = vector_backend(settings)
    rest = _check(env_config, settings)
    game, defaults = _game_and_defaults(env_id)
    kwargs = {**defaults, **rest}
    threads = kwargs.pop("num_threads", num_threads) or min(num_envs, os.cpu_count() or 1)
    size = int(settings["screen_size"])
    common = dict(img_height=size, img_width=size, stack_num=int(settings["framestack"] or 1),
                  frameskip=int(settings["frame_skip"]), noop_max=int(settings["noop_max"]),
                  episodic_life=bool(settings["terminal_on_life_loss"]))
    if backend == "envpool":
        return FramesLast(EnvPoolVector(game, num_envs, threads, settings, common, kwargs))
    vector_env = require("ale_py.vector_env", "envs", "the Atari vector env (ale-py >= 0.10)")
    return FramesLast(vector_env.AtariVectorEnv(
        game, num_envs, num_threads=threads, grayscale=bool(settings["grayscale"]),
        autoreset_mode="SameStep", reward_clipping=False, maxpool=True, **common, **kwargs))


def frames_last(obs: np.ndarray) -> np.ndarray:
    """``[N, stack, H, W(, 3)]`` frames as ``[N, H, W, stack(*3)]``: a view for grayscale
    (the copy into the fragment does the transposition)."""
    if obs.ndim == 4:
        return obs.transpose(0, 2, 3, 1)
    n, k, h, w, c = obs.shape
    return obs.transpose(0, 2, 3, 1, 4).reshape(n, h, w, k * c)


class FramesLast:
    """A vector env's frame stacks with the stack last, ``(84, 84, 4)``, as the gymnasium
    path stacks them: a checkpoint acts on either path, and the conv encoder reads them as
    channels-last memory, which oneDNN's convolutions run 1.3-1.5x faster on the CPU than
    the emulator's ``(4, 84, 84)`` (whose conversion cost a tenth of a PPO update)."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.num_envs = env.num_envs
        space = env.single_observation_space
        shape = frames_last(np.zeros((1, *space.shape), space.dtype)).shape[1:]
        self.single_observation_space = gym.spaces.Box(0, 255, shape, space.dtype)
        self.single_action_space = env.single_action_space

    @property
    def unwrapped(self) -> Any:
        return getattr(self.env, "unwrapped", self.env)

    def reset(self, *, seed: int | None = None) -> tuple[np.ndarray, dict]:
        obs, info = self.env.reset(seed=seed)
        return frames_last(obs), info

    def send(self, actions: np.ndarray) -> None:
        self.env.send(actions)

    def recv(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        obs, reward, terminated, truncated, info = self.env.recv()
        if info.get("final_obs") is not None:
            info["final_obs"] = frames_last(np.asarray(info["final_obs"]))
        return frames_last(obs), reward, terminated, truncated, info

    def close(self) -> None:
        self.env.close()


class EnvPoolVector:
    """EnvPool's Atari env behind the same send/recv/reset surface as ale-py's (the part
    the runner uses): ids in the batch order, rewards unclipped, final frames in info."""

    def __init__(self, game: str, num_envs: int, threads: int, settings: dict,
                 common: dict, kwargs: dict) -> None:
        envpool = require("envpool", "envpool", "the EnvPool Atari backend")
        if not settings["grayscale"]:
            raise VectorEnvError("atari grayscale False: EnvPool's Atari frames are grayscale "
                                 "only; use vector 'ale' for colour")
        task = "".join(part.capitalize() for part in game.split("_")) + "-v5"
        frameskip = common["frameskip"]
        self._make = lambda seed: envpool.make_gymnasium(
            task, num_envs=num_envs, num_threads=threads, reward_clip=False, seed=seed,
            img_height=common["img_height"], img_width=common["img_width"],
            stack_num=common["stack_num"], frame_skip=frameskip,
            noop_max=common["noop_max"], episodic_life=common["episodic_life"],
            repeat_action_probability=kwargs.get("repeat_action_probability", 0.0),
            use_fire_reset=kwargs.get("use_fire_reset", True),
            max_episode_steps=kwargs.get("max_num_frames_per_episode", 108000) // frameskip)
        self.seed = 0
        self.env = self._make(self.seed)
        self.num_envs = num_envs
        self.single_observation_space = self.env.observation_space
        self.single_action_space = self.env.action_space
        self._ended = np.zeros(num_envs, bool)

    def reset(self, *, seed: int | None = None) -> tuple[np.ndarray, dict]:
        if seed is not None and seed != self.seed:  # EnvPool is seeded when made
            self.env.close()
            self.seed, self.env = seed, self._make(seed)
        obs, info = self.env.reset()
        self._ended[:] = False
        return obs[np.argsort(info["env_id"])], {}

    def send(self, actions: np.ndarray) -> None:
        self.env.send(np.asarray(actions, np.int32), np.arange(self.num_envs, dtype=np.int32))

    def recv(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        # EnvPool resets on the step after an episode ends (gymnasium's NEXT_STEP): that
        # step's observation is the new episode's first and its reward 0. It is marked in
        # info["reset_step"], and the sampler masks it out (the ending step's own
        # observation is the episode's last frame).
        obs, rew, term, trunc, info = self.env.recv()
        order = np.argsort(info["env_id"])
        term, trunc = term[order], trunc[order]
        info = {"env_id": np.arange(self.num_envs), "reset_step": self._ended}
        self._ended = np.logical_or(term, trunc)
        return obs[order], rew[order], term, trunc, info

    def close(self) -> None:
        self.env.close()


class VectorAsEnv(gym.Env):
    """A vector env of one game as a gymnasium env (spaces, reset, step)."""

    def __init__(self, vector: Any) -> None:
        self.vector = vector
        self.observation_space = vector.single_observation_space
        self.action_space = vector.single_action_space

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        obs, info = self.vector.reset(seed=seed)
        return obs[0], {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.vector.send(np.asarray([action], np.int64))
        obs, reward, terminated, truncated, info = self.vector.recv()
        final = info.get("final_obs")
        done = bool(terminated[0] or truncated[0])
        # The episode's last frame: the next reset() starts the new one the env began.
        frame = final[0] if done and final is not None else obs[0]
        return frame, float(reward[0]), bool(terminated[0]), bool(truncated[0]), {}

    def close(self) -> None:
        self.vector.close()


def vector_env_factory(env_id: str, env_config: dict, settings: dict
                       ) -> Callable[[int], Any]:
    """``make(num_envs)`` for the runner: the checks run now, in the runner's constructor."""
    _check(env_config, settings)

    def make(num_envs: int) -> Any:
        return make_vector_env(env_id, env_config, settings, num_envs)

    return make


def vector_maker(config: Any, registry: dict[str, str] | None = None
                 ) -> Callable[[int], Any] | None:
    """The runner's ``make(num_envs)`` when ``config`` asks for an Atari vector env (a
    gymnasium ALE id with ``env_config`` atari vector), else None."""
    env = config.env
    if not isinstance(env, str) or ":" in env or env in (registry or {}):
        if isinstance(dict(config.env_config or {}).get("atari"), dict) and \
                config.env_config["atari"].get("vector"):
            raise VectorEnvError(f"env_config atari vector: env {env!r} is not an ALE id; "
                                 "the vector backend makes the games itself")
        return None
    from rlmesh.preprocessing import ale_id, atari_settings

    if not ale_id(env):
        return None
    rest, settings = atari_settings(dict(config.env_config or {}), env, config.model,
                                    config.preprocessor_pref)
    if settings is None or vector_backend(settings) is None:
        return None
    return vector_env_factory(env, rest, settings)


def double_buffered(config: Any, vector: bool, central: bool = False) -> bool:
    """``double_buffered_sampling`` resolved for a runner with (or without) a vector env.
    "auto": with central inference only, where the runner would otherwise idle through
    each round trip. With the runner's own forward pass the halves cost two passes of half
    the batch a step, and on a busy CPU that overhead outweighs the overlap (Pong, 4 envs, one
    torch thread on a loaded 2-core machine: 739 env steps/s split against 1008 whole)."""
    asked = config.double_buffered_sampling
    if asked == "auto":
        return vector and central and config.num_envs_per_env_runner >= 2
    if asked and not vector:
        raise VectorEnvError("double_buffered_sampling=True needs a vector env (env_config "
                             "vector, or atari vector): these envs step one at a time in the "
                             "runner")
    return bool(asked)
