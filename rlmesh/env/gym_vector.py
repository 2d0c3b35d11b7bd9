"""Any gymnasium ``VectorEnv`` as a runner's envs: one ``gym.make_vec(...)`` (or EnvPool's
gymnasium env) per runner, stepped as a whole batch, so that no Python runs per env.

What a config asks with ``env_config["vector"]`` (the rest of env_config goes to the env):

- absent or ``"auto"``: a gymnasium id with a vector entry point (``CartPole-v1``'s numpy
  ``CartPoleVectorEnv``) is stepped as one vector env once a runner has at least
  ``AUTO_MIN_ENVS`` envs; below that, and for every other env, one ``gym.Env`` per slot.
- ``True``: the id's own vector entry point; an id without one is refused in one line that
  names the options below.
- ``"sync"`` / ``"async"``: gymnasium's ``SyncVectorEnv`` / ``AsyncVectorEnv`` of the single
  env (``async``: one process per env, for envs that are slow to step).
- ``"envpool"``: EnvPool's C++ env of the same id (``Acrobot-v1``, ``Pendulum-v1``, MuJoCo),
  threads inside the runner.
- ``False``: one ``gym.Env`` per slot, as before.

A registered env or ``"pkg.module:make"`` creator may return a ``VectorEnv`` itself when
``vector`` is True: it is called with the env_config plus ``num_envs``.

``GymVector`` puts each behind the ``send``/``recv`` surface the vector sampler steps
(rlmesh/roles/vector_sampler.py), with the two autoreset modes gymnasium has mapped to what
the sampler reads: next-step (the step after an episode ended only resets: marked in
``info["reset_step"]``, its row masked out) and same-step (the ended episode's last
observation in ``info["final_obs"]``). Its first step is checked against the spaces, naming
the field that is off.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import gymnasium as gym
import numpy as np

from rlmesh.env.vector import VectorEnvError
from rlmesh.extras import require

#: A runner with at least this many envs of an id that has a vector entry point steps them
#: as one vector env unless ``vector`` says otherwise (below it the one-env path is as fast).
AUTO_MIN_ENVS = 64
VECTOR_CHOICES = (False, True, "auto", "sync", "async", "envpool")
_NEXT, _SAME = "NextStep", "SameStep"


def vector_setting(env_config: dict | None) -> Any:
    """``env_config["vector"]`` checked (absent: "auto"); one line naming the choices."""
    asked = (env_config or {}).get("vector", "auto")
    if asked is None:
        asked = "auto"
    if not any(asked is c or (isinstance(c, str) and asked == c) for c in VECTOR_CHOICES):
        raise VectorEnvError(f"env_config vector={asked!r}; valid: False, True (the id's "
                             "vector entry point), 'auto', 'sync', 'async', 'envpool'")
    return asked


def vector_entry_point(env_id: str) -> Any:
    """The id's gymnasium vector entry point, or None."""
    spec = gym.envs.registry.get(env_id)
    return None if spec is None else spec.vector_entry_point


def _options_line(env: Any) -> str:
    return (f"env {env!r} has no vector entry point in gymnasium's registry: set env_config "
            "vector 'envpool' (EnvPool's env of the same id), 'sync' or 'async' (gymnasium's "
            "SyncVectorEnv/AsyncVectorEnv of the single env), or False (one env per slot); "
            "or register the id with a vector_entry_point")


def gym_vector_maker(config: Any, registry: dict[str, str] | None = None
                     ) -> Callable[[int], "GymVector"] | None:
    """The runner's ``make(num_envs)`` when ``config`` asks for (or "auto" picks) a vector
    env of a non-Atari env, else None. Settings the vector env cannot take are refused here,
    in the runner's constructor, in one line each."""
    env = config.env
    env_config = dict(config.env_config or {})
    asked = vector_setting(env_config)
    mode = getattr(config, "gym_env_vectorize_mode", None)
    if mode is not None and "vector" not in env_config:  # RLlib's key, gymnasium's modes
        name = str(getattr(mode, "value", mode)).lower()
        # RLlib's default, "sync", is what the runner's own loop over its envs does (with
        # each env's failures recovered): "auto" decides, as without the key.
        modes = {"sync": "auto", "async": "async", "vector_entry_point": True}
        if name not in modes:
            raise VectorEnvError(f"gym_env_vectorize_mode={mode!r}; valid: 'sync', 'async', "
                                 "'vector_entry_point' (gymnasium.VectorizeMode), or None")
        asked = modes[name]
    if asked is False:
        return None
    rest = {k: v for k, v in env_config.items() if k != "vector"}
    n = config.num_envs_per_env_runner
    is_id = isinstance(env, str) and env not in (registry or {}) and ":" not in env
    if asked == "auto":
        if not (is_id and vector_entry_point(env) is not None and n >= AUTO_MIN_ENVS
                and _plain_settings(config) is None):
            return None
        asked = True
    reason = _plain_settings(config)
    if reason is not None:
        raise VectorEnvError(f"env_config vector={asked!r}: {reason}")
    if not is_id:
        if asked is True:
            return _creator_maker(env, rest, registry or {}, config)
        if asked == "envpool":
            raise VectorEnvError(f"env_config vector 'envpool': env {env!r} is not an id "
                                 "(EnvPool makes its envs by id, e.g. 'Pendulum-v1')")
        raise VectorEnvError(f"env_config vector {asked!r}: env {env!r} is not a gymnasium "
                             "id; a creator may return a VectorEnv itself (vector True)")
    if asked is True and vector_entry_point(env) is None:
        raise VectorEnvError(_options_line(env))
    if asked == "envpool":
        envpool = require("envpool", "envpool", f"EnvPool's {env}")
        if env not in envpool.list_all_envs():
            raise VectorEnvError(f"env_config vector 'envpool': EnvPool has no env {env!r} "
                                 f"(it has e.g. CartPole-v1, Acrobot-v1, Pendulum-v1, "
                                 "HalfCheetah-v4); set vector 'sync' instead")
        return lambda num_envs: GymVector(EnvPoolGym(env, num_envs, rest), env, autoreset=_NEXT)
    mode = {True: "vector_entry_point", "sync": "sync", "async": "async"}[asked]

    def make(num_envs: int) -> GymVector:
        kwargs: dict[str, Any] = {}
        if mode != "vector_entry_point":  # gymnasium's own: same-step, no wasted rows
            kwargs["vector_kwargs"] = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
        try:
            made = gym.make_vec(env, num_envs=num_envs, vectorization_mode=mode, **kwargs, **rest)
        except TypeError as exc:
            raise VectorEnvError(f"env {env!r} as a vector env ({mode}) does not take "
                                 f"env_config {sorted(rest)}: {exc}") from None
        return GymVector(made, env)

    return make


def _plain_settings(config: Any) -> str | None:
    """Why the config needs the one-env path (wrappers per env), or None."""
    from rlmesh.preprocessing import framestack_size

    if config.horizon is not None:
        return "horizon wraps each env in a time limit; set it in the env (max_episode_steps)"
    if framestack_size(config.model) > 1:
        return "the model's framestack wraps each env; set vector False"
    return None


def _creator_maker(env: Any, rest: dict, registry: dict[str, str], config: Any
                   ) -> Callable[[int], "GymVector"]:
    from rlmesh.env.registry import EnvContext, creator_for

    creator = creator_for(env, registry)

    def make(num_envs: int) -> GymVector:
        made = creator(EnvContext({**rest, "num_envs": num_envs}, 0, 0, config.num_env_runners))
        if not isinstance(made, gym.vector.VectorEnv):
            raise VectorEnvError(f"env {env!r} with env_config vector True made a "
                                 f"{type(made).__name__}, not a gymnasium VectorEnv: return "
                                 "one (env_config num_envs is the batch size) or set vector "
                                 "'sync' or False")
        return GymVector(made, str(env))

    return make


class EnvPoolGym:
    """EnvPool's gymnasium env of ``env_id`` as a VectorEnv to ``GymVector``: EnvPool seeds
    its envs when it makes them, so a reset with another seed makes them again."""

    def __init__(self, env_id: str, num_envs: int, kwargs: dict) -> None:
        self.env_id, self.num_envs, self.kwargs = env_id, num_envs, dict(kwargs)
        self.kwargs.setdefault("num_threads", 0)
        self.seed: int | None = None
        self.env = self._make(0)
        self.single_observation_space = self.env.observation_space
        self.single_action_space = self.env.action_space
        self.metadata = {"autoreset_mode": _NEXT}  # EnvPool resets on the step after the end

    def _make(self, seed: int) -> Any:
        import envpool

        try:
            with warnings.catch_warnings():  # its Box bounds are float64: gymnasium says so
                warnings.simplefilter("ignore", UserWarning)
                return envpool.make_gymnasium(self.env_id, num_envs=self.num_envs, seed=seed,
                                              **self.kwargs)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise VectorEnvError(f"env {self.env_id!r} in EnvPool does not take env_config "
                                 f"{sorted(self.kwargs)}: {exc}") from None

    def reset(self, *, seed: int | None = None) -> tuple[np.ndarray, dict]:
        if seed is not None and seed != self.seed:
            self.env.close()
            self.env, self.seed = self._make(int(seed)), seed
        return self.env.reset()

    def step(self, actions: np.ndarray) -> Any:
        return self.env.step(actions)

    def close(self) -> None:
        self.env.close()


class GymVector:
    """A gymnasium ``VectorEnv`` (or EnvPool's) behind the sampler's ``reset``/``send``/
    ``recv``. ``autoreset``: the env's mode when its metadata does not say (EnvPool)."""

    def __init__(self, env: Any, name: str, autoreset: str | None = None) -> None:
        self.env, self.name = env, name
        self.num_envs = int(env.num_envs)
        mode = (getattr(env, "metadata", None) or {}).get("autoreset_mode", autoreset or _NEXT)
        mode = getattr(mode, "value", mode)
        if mode not in (_NEXT, _SAME):
            raise VectorEnvError(f"env {name!r}: vector env autoreset mode {mode!r}; the "
                                 "sampler takes NextStep and SameStep (an env that never "
                                 "resets itself cannot run on)")
        self.same_step = mode == _SAME
        self.single_observation_space = (getattr(env, "single_observation_space", None)
                                         or env.observation_space)
        self.single_action_space = getattr(env, "single_action_space", None) or env.action_space
        self._ended = np.zeros(self.num_envs, bool)
        self._actions: Any = None
        self._checked = False

    @property
    def unwrapped(self) -> Any:
        return getattr(self.env, "unwrapped", self.env)

    def reset(self, *, seed: int | None = None) -> tuple[np.ndarray, dict]:
        obs, info = self.env.reset(seed=seed)
        (obs,) = self._in_order(info, obs)
        self._check("observations", obs, self.single_observation_space.shape,
                    self.single_observation_space.dtype)
        self._ended[:] = False
        return obs, {}

    def _in_order(self, info: Any, *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
        """``arrays`` in env order where the env returned them in another (EnvPool's
        ``info["env_id"]``)."""
        ids = info.get("env_id") if isinstance(info, dict) else None
        if ids is None or np.array_equal(ids, np.arange(self.num_envs)):
            return arrays
        order = np.argsort(ids)
        return tuple(a[order] for a in arrays)

    def send(self, actions: np.ndarray) -> None:
        self._actions = actions

    def recv(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        obs, reward, terminated, truncated, info = self.env.step(self._actions)
        obs, reward, terminated, truncated = self._in_order(info, obs, reward, terminated,
                                                            truncated)
        if not self._checked:
            self._check_step(obs, reward, terminated, truncated)
        out: dict[str, Any] = {"infos": info}  # the env's own, for callbacks' last_info
        if self.same_step:
            done = np.logical_or(terminated, truncated)
            if done.any():
                out["final_obs"] = self._final_obs(info, done, obs)
        else:
            out["reset_step"] = self._ended
            self._ended = np.logical_or(terminated, truncated)
        return obs, reward, terminated, truncated, out

    def _final_obs(self, info: dict, done: np.ndarray, obs: np.ndarray) -> np.ndarray:
        """The ended episodes' last observations as one array (rows of the envs not done:
        their current ones)."""
        final = info.get("final_obs", info.get("final_observation"))
        if final is None:
            raise VectorEnvError(f"env {self.name!r}: a same-step vector env ended an "
                                 "episode without info['final_obs']")
        if isinstance(final, np.ndarray) and final.dtype != object:
            return final
        out = np.array(obs)
        for k in np.flatnonzero(done):
            out[k] = final[k]
        return out

    def _check(self, field: str, values: Any, shape: tuple, dtype: Any) -> None:
        arr = values if isinstance(values, np.ndarray) else None
        want = (self.num_envs, *(shape or ()))
        if arr is None or arr.shape != want:
            got = (f"a {type(values).__name__}" if arr is None else f"shape {arr.shape}")
            raise VectorEnvError(f"env {self.name!r}: vector env {field}: {got}, expected an "
                                 f"array of shape {want} (num_envs {self.num_envs})")
        if dtype is not None and np.dtype(dtype) != arr.dtype:
            raise VectorEnvError(f"env {self.name!r}: vector env {field} of dtype {arr.dtype}, "
                                 f"the space says {np.dtype(dtype)}")

    def _check_step(self, obs: Any, reward: Any, terminated: Any, truncated: Any) -> None:
        space = self.single_observation_space
        self._check("observations", obs, space.shape, space.dtype)
        self._check("rewards", reward, (), None)
        if reward.dtype.kind not in "fiu":
            raise VectorEnvError(f"env {self.name!r}: vector env rewards of dtype "
                                 f"{reward.dtype}, expected numbers")
        self._check("terminations", terminated, (), np.bool_)
        self._check("truncations", truncated, (), np.bool_)
        self._checked = True

    def close(self) -> None:
        self.env.close()
