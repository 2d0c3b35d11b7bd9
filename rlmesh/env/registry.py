"""Environments named by plain data: RLlib's ``register_env``, ``make_env`` for a registered
name, an import path or a gymnasium id, spaces as plain data, and actions as the env takes
them. A creator crosses processes as its import path; a lambda or a local one as a token
that this machine's child processes resolve (rlmesh.runtime.handed: never over a socket)."""

from __future__ import annotations

import difflib
import logging
from typing import Any, Callable

import gymnasium as gym
import numpy as np

from rlmesh.rl.spec import clip_actions
from rlmesh.runtime import handed
from rlmesh.runtime.import_path import import_module, import_object, path_of

_REGISTRY: dict[str, str] = {}  # name -> "module:qualname" of its creator (or its token)
EXTRA_HINT = "pip install 'rlmesh[envs]'"  # the extra with the envs beyond gymnasium's own
MUJOCO_HINT = "pip install 'rlmesh[mujoco]'"
logger = logging.getLogger("rlmesh.env.registry")


class EnvError(ValueError):
    """A gymnasium id that cannot be made here (unknown, or a package missing); the CLI
    prints it as one line."""


class EnvContext(dict):
    """The ``env_config`` a creator receives (RLlib's EnvContext): the user's dict, plus
    ``worker_index`` (the env runner, from 1; 0 is the driver) and ``vector_index`` (the
    env within its runner) as attributes, so that envs can differ per copy."""

    def __init__(self, env_config: dict | None = None, worker_index: int = 0,
                 vector_index: int = 0, num_workers: int = 0) -> None:
        super().__init__(env_config or {})
        self.worker_index = worker_index
        self.vector_index = vector_index
        self.num_workers = num_workers


# --- registry ---

def register_env(name: str, creator: Callable[[dict], gym.Env]) -> None:
    """Register ``creator(env_config) -> gymnasium.Env`` under ``name``, as RLlib's
    ``ray.tune.registry.register_env``. A module-level creator is imported by path where
    envs are made; a lambda or a local function reaches this machine's env runners through
    the pipe they are started with (on a launched cluster it needs an import path)."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"env name must be a non-empty string, got {name!r}")
    _REGISTRY[name] = path_of(creator, f"env creator for {name!r}")


def env_registry() -> dict[str, str]:
    """``{name: "module:creator"}`` of every registered env, for the config runners get."""
    return dict(_REGISTRY)


def adopt_registry(entries: dict[str, str]) -> None:
    """Register what ``env_registry()`` gave in the process that started this one (a tune
    trial's driver), before this process's own registrations."""
    for name, path in entries.items():
        _REGISTRY.setdefault(name, path)


def make_env(env_spec: Any, env_config: dict | None = None,
             registry: dict[str, str] | None = None, *, model: dict | None = None,
             preprocessor_pref: str | None = "deepmind") -> gym.Env:
    """Build one env from a registered name, a ``"module:callable"`` path (called with
    ``env_config``), a creator itself, or a gymnasium id (``gym.make(id, **env_config)``).
    An ALE id takes DeepMind's Atari preprocessing, shaped by the ``model`` config's Atari
    keys, unless ``preprocessor_pref`` is not "deepmind" (rlmesh/preprocessing.py)."""
    # A creator always gets an EnvContext (the driver's probe copy: worker_index 0).
    env_config = env_config if isinstance(env_config, EnvContext) else EnvContext(env_config)
    registry = _REGISTRY if registry is None else registry
    if env_spec is None:
        raise ValueError("no env configured: set it with config.environment('CartPole-v1') "
                         "or a registered name or 'pkg.module:make_env'")
    if handed.is_token(env_spec):
        env_spec = handed.resolve(env_spec, "env")
    if isinstance(env_spec, str) and ":" in env_spec and env_spec not in registry:
        env = _make_from_path(env_spec, env_config)
    elif callable(env_spec) or (isinstance(env_spec, str) and env_spec in registry):
        env = creator_for(env_spec, registry)(env_config)
    elif not isinstance(env_spec, str):
        raise TypeError(f"env must be a string (id, registered name or import path), got {env_spec!r}")
    else:
        env_config = env_config_without_vector(env_config)
        from rlmesh.preprocessing import ale_id, atari_settings, make_atari

        if ale_id(env_spec) is None:  # an Atari id without ale-py
            raise EnvError(f"env {env_spec!r} is an Atari game: it needs ale-py (which "
                           f"ships the ROMs): {EXTRA_HINT}")
        rest, atari = atari_settings(env_config, env_spec, model, preprocessor_pref)
        if atari and atari["vector"]:  # one game of the C++ vector env (rlmesh/env/vector.py)
            from rlmesh.env.vector import VectorAsEnv, make_vector_env

            env = VectorAsEnv(make_vector_env(env_spec, rest, atari, 1, num_threads=1))
        else:
            env = make_atari(env_spec, rest, atari) if atari else _gym_make(env_spec, rest, registry)
    if not isinstance(env, gym.Env):
        raise TypeError(f"env {env_spec!r} made a {type(env).__name__}, not a gymnasium.Env")
    return env


def env_config_without_vector(env_config: Any) -> Any:
    """``env_config`` less the ``vector`` key (rlmesh/env/gym_vector.py): what one env of
    a gymnasium id is made with."""
    if not isinstance(env_config, dict) or "vector" not in env_config:
        return env_config
    rest = type(env_config)(env_config) if type(env_config) is dict else _copy(env_config)
    rest.pop("vector", None)
    return rest


def _copy(env_config: Any) -> Any:
    """An ``EnvContext`` (a dict subclass with the runner's indices) copied with them."""
    out = dict.__new__(type(env_config))
    out.update(env_config)
    out.__dict__.update(getattr(env_config, "__dict__", {}))
    return out


def creator_for(env_spec: Any, registry: dict[str, str] | None = None) -> Callable[[dict], Any]:
    """The callable that makes ``env_spec`` from an env_config: the creator itself, a
    registered name's, or an import path's ``"pkg.module:make"``; ValueError for an id."""
    registry = _REGISTRY if registry is None else registry
    if handed.is_token(env_spec):
        env_spec = handed.resolve(env_spec, "env")
    if callable(env_spec):
        return env_spec
    if isinstance(env_spec, str) and env_spec in registry:
        return import_object(registry[env_spec], f"registered env {env_spec!r}")
    if isinstance(env_spec, str) and ":" in env_spec:
        creator = _path_creator(env_spec)
        if creator is not None:
            return creator
    raise ValueError(f"env {env_spec!r} is not a creator, a registered name or an import "
                     "path 'pkg.module:make'")


def missing_module_error(env_spec: str, exc: BaseException) -> EnvError | None:
    """The one line for an env whose code imports a module that is not installed (the
    import path's own module, or one it imports); None for other errors."""
    cause = exc if isinstance(exc, ModuleNotFoundError) else exc.__cause__
    name = getattr(cause, "name", None)
    if not isinstance(cause, ModuleNotFoundError) or not name:
        return None
    top = name.partition(".")[0]
    return EnvError(f"env {env_spec!r} needs the module {name!r}, which is not installed here: "
                    f"install the package that provides it (often pip install {top}), or, for "
                    "your own code, run from its folder or add it to PYTHONPATH")


def _path_creator(env_spec: str) -> Callable[[dict], Any] | None:
    """The callable an import path ``"pkg.module:make"`` names (its module imported), or
    None where the module has no such callable."""
    module_name, _, attr = env_spec.partition(":")
    try:
        module = import_module(module_name, "env", env_spec)
    except ValueError as exc:
        raise (missing_module_error(env_spec, exc) or exc) from None
    creator = getattr(module, attr, None)
    return creator if callable(creator) else None


def _make_from_path(env_spec: str, env_config: dict) -> gym.Env:
    creator = _path_creator(env_spec)
    if creator is not None:
        return creator(env_config)
    module_name, _, attr = env_spec.partition(":")
    try:  # gymnasium's own "module:EnvId-v0": the import registered the id
        return gym.make(env_spec, **env_config)
    except gym.error.Error as exc:
        raise ValueError(f"env {env_spec!r}: module {module_name!r} has no callable {attr!r}, "
                         f"and it is not a gymnasium id either ({exc})") from None


def _gym_make(env_id: str, env_config: dict, registry: dict[str, str]) -> gym.Env:
    if env_id.startswith("MinAtar/") and env_id not in gym.envs.registry:
        _register_minatar(env_id)
    current = mujoco_current_id(env_id)
    if current is not None:
        _say_once(f"env {env_id!r} was a mujoco-py env, which gymnasium 1.x no longer has: "
                  f"running {current!r} (set env: {current} to silence this)")
        env_id = current
    try:
        if _is_mujoco(env_id):
            _route_mujoco_warnings()
        return gym.make(env_id, **env_config)
    except (gym.error.DependencyNotInstalled, ImportError) as exc:
        # gymnasium's advice names its own extras (gymnasium[mujoco]; swig and gymnasium[box2d],
        # which predates box2d's wheels); rlmesh's extras install what they hold. Its MuJoCo
        # package imports mujoco, imageio and packaging: any of them missing is the extra.
        if _is_mujoco(env_id):
            missing = getattr(exc, "name", None) or "mujoco"
            raise EnvError(f"env {env_id!r} is a MuJoCo env: it needs the {missing} package: "
                           f"{MUJOCO_HINT}") from None
        if isinstance(exc, ImportError):
            raise (missing_module_error(env_id, exc) or exc) from None
        hint = EXTRA_HINT if "box2d" in str(exc).lower() else str(exc)
        raise EnvError(f"env {env_id!r} needs a package that is not installed: {hint}") from None
    except gym.error.Error as exc:
        known = list(gym.envs.registry) + list(registry)
        close = difflib.get_close_matches(env_id, known, n=3, cutoff=0.6)
        hint = f" Did you mean {' or '.join(map(repr, close))}?" if close else ""
        raise EnvError(
            f"env {env_id!r} not found: it is not a registered name (registered: "
            f"{sorted(registry) or 'none'}), not an import path 'pkg.module:make_env', and "
            f"gymnasium says: {exc}.{hint}") from None


def mujoco_current_id(env_id: str) -> str | None:
    """The v5 id for one of gymnasium's MuJoCo ids that it no longer makes: v2 and v3 ran on
    mujoco-py (gymnasium 1.x registers them only to raise), v1 predates gymnasium; RLlib's
    tuned examples name them. None for any other id (v4 and v5 run as they are)."""
    name, sep, version = env_id.rpartition("-v")
    if not sep or not version.isdigit() or int(version) >= 4:
        return None
    if not _is_mujoco(f"{name}-v5"):
        return None
    old = gym.envs.registry.get(env_id)
    if old is not None and isinstance(old.entry_point, str):
        return None  # registered again by something that makes it (a user's own env)
    return f"{name}-v5"


def _is_mujoco(env_id: str) -> bool:
    """Whether gymnasium makes ``env_id`` from its MuJoCo package (mujoco's bindings)."""
    spec = gym.envs.registry.get(env_id)
    return spec is not None and str(spec.entry_point).startswith("gymnasium.envs.mujoco.")


def _route_mujoco_warnings() -> None:
    """MuJoCo's warnings through rlmesh's log, each once per process, instead of MuJoCo's
    default: a line on stderr from every process and a MUJOCO_LOG.TXT file in the working
    directory. mujoco 3.x warns that gymnasium's half_cheetah.xml uses a deprecated
    attribute (settotalmass) on every load: a compiler deprecation is logged at debug. A
    handler the user set stays."""
    try:
        import mujoco
    except ImportError:
        return  # gym.make says it (the extra) in one line
    if mujoco.get_mju_user_warning() is not None:
        return

    def warn(message: str) -> None:
        if "deprecated" in message:
            logger.debug("MuJoCo: %s", message)
        else:
            _say_once(f"MuJoCo: {message}")

    mujoco.set_mju_user_warning(warn)


_SAID: set[str] = set()


def _say_once(line: str) -> None:
    """Warn once per process: every runner makes several copies of its env."""
    if line not in _SAID:
        _SAID.add(line)
        logger.warning("%s", line)


def _register_minatar(env_id: str) -> None:
    """minatar (1.0.15) registers its ids, ``MinAtar/Breakout-v1``, only when
    ``minatar.gym.register_envs()`` is called: importing it does not."""
    try:
        import minatar.gym
    except ImportError:
        raise EnvError(f"env {env_id!r} is a MinAtar game: it needs minatar: {EXTRA_HINT}") from None
    minatar.gym.register_envs()


def spaces_of(env_spec: Any, env_config: dict | None = None,
              registry: dict[str, str] | None = None, **kwargs: Any) -> tuple[gym.Space, gym.Space]:
    """``(observation_space, action_space)`` of the env, from one copy built and closed
    (``kwargs``: make_env's)."""
    env = make_env(env_spec, env_config, registry, **kwargs)
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


# --- spaces as plain data ---

def as_space(value: Any) -> gym.Space:
    """A gymnasium space given as one or as its data form (``space_to_data``)."""
    if isinstance(value, gym.Space):
        return value
    if not isinstance(value, dict):
        raise TypeError(f"expected a gymnasium space or its data form (a dict), got {value!r}")
    return space_from_data(value)


def space_to_data(space: gym.Space) -> dict[str, Any]:
    """A space as wire-encodable plain data; ``space_from_data`` reverses it."""
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.Box):
        return {"type": "Box", "low": space.low, "high": space.high, "dtype": space.dtype.str}
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": space.nvec}
    if isinstance(space, gym.spaces.MultiBinary):
        return {"type": "MultiBinary", "n": np.asarray(space.n).tolist()}
    if isinstance(space, gym.spaces.Tuple):
        return {"type": "Tuple", "spaces": [space_to_data(s) for s in space.spaces]}
    if isinstance(space, gym.spaces.Dict):
        return {"type": "Dict", "spaces": {k: space_to_data(s) for k, s in space.spaces.items()}}
    raise TypeError(f"space {space} cannot be described as plain data")


def space_from_data(data: dict[str, Any]) -> gym.Space:
    kind = data["type"]
    if kind == "Discrete":
        return gym.spaces.Discrete(data["n"], start=data["start"])
    if kind == "Box":
        dtype = np.dtype(data["dtype"])  # bounds as lists (from JSON) come back as float64
        return gym.spaces.Box(np.asarray(data["low"], dtype), np.asarray(data["high"], dtype),
                              dtype=dtype)
    if kind == "MultiDiscrete":
        return gym.spaces.MultiDiscrete(np.array(data["nvec"]))
    if kind == "MultiBinary":
        return gym.spaces.MultiBinary(data["n"])
    if kind == "Tuple":
        return gym.spaces.Tuple([space_from_data(s) for s in data["spaces"]])
    if kind == "Dict":
        return gym.spaces.Dict({k: space_from_data(s) for k, s in data["spaces"].items()})
    raise ValueError(f"unknown space type {kind!r}")


# --- actions as the env takes them ---

def actions_for_env(actions: np.ndarray, action_space: gym.Space,
                    normalize_actions: bool = True, clip: bool = True) -> np.ndarray:
    """The actions to step envs with, from what the policy sampled (which is what gets
    stored and scored). Box spaces with finite bounds and ``normalize_actions``: the
    policy acts in [-1, 1], clipped to it and rescaled to the bounds (RLlib's
    ``unsquash_action``); otherwise Box actions are clipped to the bounds (``clip``, the
    config's ``clip_actions``) or passed as sampled. Other spaces pass through. Works on
    one action or a batch."""
    if isinstance(action_space, (gym.spaces.Tuple, gym.spaces.Dict)):
        return _nested_actions_for_env(actions, action_space, normalize_actions, clip)
    if not isinstance(action_space, gym.spaces.Box):
        return actions
    low, high = action_space.low, action_space.high
    if normalize_actions and np.all(np.isfinite(low)) and np.all(np.isfinite(high)):
        scaled = low + (np.clip(actions, -1.0, 1.0) + 1.0) * ((high - low) / 2.0)
        return np.clip(scaled, low, high).astype(action_space.dtype, copy=False)
    return clip_actions(actions, action_space) if clip else actions


def _nested_actions_for_env(records: np.ndarray, action_space: gym.Space,
                            normalize_actions: bool, clip: bool) -> Any:
    """Packed Tuple/Dict actions (``rl/nested_spaces.py``) as the env takes them: one nested
    structure, or a list of them for a batch; Box leaves rescaled or clipped."""
    from rlmesh.rl.nested_spaces import build, leaves

    records = np.asarray(records)
    flat = records.reshape(-1, records.shape[-1])
    values = {}
    for leaf in leaves(action_space):
        v = np.ascontiguousarray(flat[:, leaf.offset:leaf.offset + leaf.nbytes]).view(leaf.dtype)
        v = v.reshape(len(flat), *leaf.shape)
        if isinstance(leaf.space, gym.spaces.Box):
            v = actions_for_env(v, leaf.space, normalize_actions, clip)
        values[leaf.path] = v
    rows = [build(action_space, {p: (int(v[i]) if v.ndim == 1 else v[i]) for p, v in values.items()})
            for i in range(len(flat))]
    return rows[0] if records.ndim == 1 else rows
