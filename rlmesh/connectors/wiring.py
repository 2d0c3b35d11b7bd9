"""How the config's connector factories become pipelines, and how runners and learners
call them (roles/env_sampler.py, roles/learner.py, driver/algorithm.py call here).

Factories are RLlib's: ``env_to_module_connector(env)`` (newer: ``(env, spaces,
device)``), ``module_to_env_connector(env)`` (newer: ``(env, spaces)``),
``learner_connector(input_observation_space, input_action_space)``; each returns a
connector, a list of connectors, or a pipeline. A lambda reaches this machine's runner
processes as the config's other functions do (runtime/handed.py)."""

from __future__ import annotations

import inspect
from typing import Any, Callable

import gymnasium as gym
import numpy as np

from rlmesh.connectors.connector_pipeline_v2 import ConnectorPipelineV2
from rlmesh.connectors.connector_v2 import ConnectorV2
from rlmesh.connectors.episode import column_episodes

KEYS = ("env_to_module_connector", "module_to_env_connector", "learner_connector")
_SIGNATURES = {"env_to_module_connector": "(env) or (env, spaces, device)",
               "module_to_env_connector": "(env) or (env, spaces)",
               "learner_connector": "(input_observation_space, input_action_space)"}


def configured(cfg: Any, key: str) -> Any:
    return getattr(cfg, key, None)


def _factory(value: Any, key: str) -> Callable[..., Any]:
    if isinstance(value, str):
        from rlmesh.runtime.import_path import import_object

        value = import_object(value, key)
    if isinstance(value, type) and issubclass(value, ConnectorV2):  # the class itself
        cls = value
        return lambda *args: cls()  # its spaces come from the pipeline
    if not callable(value):
        raise TypeError(f"{key}: expected a function {_SIGNATURES[key]} returning connectors, "
                        f"got {type(value).__name__}")
    return value


def _call(factory: Callable[..., Any], key: str, candidates: list[tuple[Any, ...]]) -> Any:
    """``factory`` called with the first of ``candidates`` its signature takes."""
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):
        return factory(*candidates[0])
    for args in candidates:
        try:
            sig.bind(*args)
        except TypeError:
            continue
        return factory(*args)
    raise TypeError(f"{key}: the function {getattr(factory, '__qualname__', factory)}{sig} "
                    f"takes none of RLlib's arguments {_SIGNATURES[key]}")


def _pipeline(made: Any, key: str, cls: type[ConnectorPipelineV2], obs_space: gym.Space,
              act_space: gym.Space) -> ConnectorPipelineV2:
    if isinstance(made, ConnectorPipelineV2):
        connectors = list(made.connectors)
    elif isinstance(made, ConnectorV2):
        connectors = [made]
    elif isinstance(made, (list, tuple)):
        connectors = list(made)
    else:
        raise TypeError(f"{key}: the function returned {type(made).__name__}; return a "
                        "ConnectorV2, a list of them, or a pipeline")
    for c in connectors:
        if not isinstance(c, ConnectorV2):
            raise TypeError(f"{key}: {c!r} is a {type(c).__name__}, not a ConnectorV2 "
                            "(rlmesh.connectors.connector_v2)")
    return cls(obs_space, act_space, connectors=connectors)


def env_to_module(cfg: Any, env: Any, obs_space: gym.Space, act_space: gym.Space
                  ) -> ConnectorPipelineV2 | None:
    """The env-to-module pipeline of ``cfg`` (None when not configured), its input spaces
    the env's as the runner steps it."""
    value = configured(cfg, "env_to_module_connector")
    if value is None:
        return None
    from rlmesh.connectors.env_to_module import EnvToModulePipeline

    spaces = {"__env__": (obs_space, act_space), "__env_single__": (obs_space, act_space)}
    made = _call(_factory(value, "env_to_module_connector"), "env_to_module_connector",
                 [(env,), (env, spaces), (env, spaces, None)])
    return _pipeline(made, "env_to_module_connector", EnvToModulePipeline, obs_space, act_space)


def module_to_env(cfg: Any, env: Any, obs_space: gym.Space, act_space: gym.Space
                  ) -> ConnectorPipelineV2 | None:
    value = configured(cfg, "module_to_env_connector")
    if value is None:
        return None
    from rlmesh.connectors.module_to_env import ModuleToEnvPipeline

    spaces = {"__env__": (obs_space, act_space), "__env_single__": (obs_space, act_space)}
    made = _call(_factory(value, "module_to_env_connector"), "module_to_env_connector",
                 [(env,), (env, spaces), (env, spaces, None)])
    return _pipeline(made, "module_to_env_connector", ModuleToEnvPipeline, obs_space, act_space)


def learner(cfg: Any, obs_space: gym.Space, act_space: gym.Space) -> ConnectorPipelineV2 | None:
    value = configured(cfg, "learner_connector")
    if value is None:
        return None
    from rlmesh.connectors.learner import LearnerConnectorPipeline

    made = _call(_factory(value, "learner_connector"), "learner_connector",
                 [(obs_space, act_space), (obs_space, act_space, None)])
    return _pipeline(made, "learner_connector", LearnerConnectorPipeline, obs_space, act_space)


def module_observation_space(cfg: Any, env: Any, obs_space: gym.Space,
                             act_space: gym.Space) -> gym.Space:
    """What the policy sees: the env-to-module pipeline's output space (the env's without
    one)."""
    pipeline = env_to_module(cfg, env, obs_space, act_space)
    return obs_space if pipeline is None else pipeline.observation_space


# --- on a runner ---

def _declared_mismatch(space: gym.Space | None, value: Any) -> str | None:
    """Why ``value`` does not fit ``space`` (shape checks of Box/Discrete), or None."""
    if isinstance(space, gym.spaces.Box):
        shape = np.shape(value)
        if isinstance(value, dict) or shape != space.shape:
            got = f"a dict of {sorted(value)}" if isinstance(value, dict) else f"shape {shape}"
            return f"declared {space} but produced {got}"
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(value, dict) or set(value) != set(space.spaces):
            got = sorted(value) if isinstance(value, dict) else f"a {type(value).__name__}"
            return f"declared a Dict of {sorted(space.spaces)} but produced {got}"
    return None


def _module_obs(batch: dict[str, Any], episode: Any) -> Any:
    """The observation the module acts on: the batch's ``obs`` when a connector put one
    there (RLlib's ``{(episode id,): [items]}``, a list, or a batched array), else the
    episode's last observation."""
    obs = batch.get("obs") if batch else None
    if obs is None:
        return episode.get_observations(-1)
    if isinstance(obs, dict):
        items = obs.get((episode.id_,))
        if items is None:
            items = next(iter(obs.values()))
        return items[-1]
    if isinstance(obs, list):
        return obs[-1]
    return obs[0] if hasattr(obs, "shape") and np.ndim(obs) >= 1 else obs


def _short(space: Any) -> str:
    """A space in a few words (a Box's bounds left out)."""
    if isinstance(space, gym.spaces.Box):
        return f"Box(shape={space.shape}, {space.dtype})"
    return str(space)


class RunnerConnectors:
    """A runner's pipelines and each env's running episode (the sampler's own, the
    callbacks' SingleAgentEpisode, set at each reset); the first output of each connector
    is checked against the space it declared."""

    def __init__(self, env_to_module: ConnectorPipelineV2 | None,
                 module_to_env: ConnectorPipelineV2 | None, num_envs: int,
                 obs_space: gym.Space, act_space: gym.Space) -> None:
        self.env_to_module = env_to_module
        self.module_to_env = module_to_env
        self.obs_space, self.act_space = obs_space, act_space
        self.episodes: list[Any] = [None] * num_envs  # the sampler's, from each reset
        self._checked = False
        self.explore: bool | None = None
        self.rl_module: Any = None
        self.metrics: Any = None  # the runner's MetricsLogger (RLlib's metrics=)

    @property
    def output_observation_space(self) -> gym.Space:
        return self.obs_space if self.env_to_module is None else self.env_to_module.observation_space

    def observe(self, b: int) -> Any:
        """Env ``b``'s newest observation through the env-to-module pipeline."""
        ep = self.episodes[b]
        if self.env_to_module is None:
            return ep.get_observations(-1)
        if not self._checked:
            self._checked = True
            return self._first_call(ep)
        batch = self.env_to_module(rl_module=self.rl_module, batch={}, episodes=[ep],
                                   explore=self.explore, shared_data={}, metrics=self.metrics)
        return _module_obs(batch, ep)

    def _first_call(self, ep: Any) -> Any:
        batch: dict[str, Any] = {}
        shared: dict[str, Any] = {}
        for i, c in enumerate(self.env_to_module.connectors):
            try:
                out = c(rl_module=self.rl_module, batch=batch, episodes=[ep],
                        explore=self.explore, shared_data=shared, metrics=self.metrics)
            except (ValueError, TypeError, IndexError, KeyError) as e:
                raise ValueError(
                    f"env_to_module_connector: connector {type(c).__name__} (number {i + 1} "
                    f"of the pipeline) failed on its first call: {type(e).__name__}: "
                    f"{str(e).strip().splitlines()[0] if str(e).strip() else ''}; it was "
                    f"built for {_short(c.input_observation_space)} (what the connectors "
                    "before it "
                    f"declared) and the episode's last observation has shape "
                    f"{np.shape(ep.get_observations(-1))}: a connector that reads the "
                    "episode goes before one that puts its output in the batch "
                    "(FrameStackingEnvToModule)") from None
            batch = batch if out is None else out
            problem = _declared_mismatch(c.observation_space, _module_obs(batch, ep))
            if problem is not None:
                raise ValueError(f"env_to_module_connector: connector {type(c).__name__} "
                                 f"{problem}; make recompute_output_observation_space return "
                                 "the space of what __call__ produces")
        return _module_obs(batch, ep)

    def _stateful(self) -> list[tuple[str, Any]]:
        pipeline = self.env_to_module
        return [] if pipeline is None else [
            (f"{i:02d}_{type(c).__name__}", c) for i, c in enumerate(pipeline.connectors)
            if hasattr(c, "flush") and hasattr(c, "merge_buffer")]

    def flush_filters(self) -> dict[str, Any]:
        """What each stateful connector saw since the last flush, by position and class."""
        return {key: c.flush() for key, c in self._stateful()
                if getattr(c, "buffer", 0) is not None}

    def filter_states(self) -> dict[str, Any]:
        return {key: c.get_state() for key, c in self._stateful()}

    def set_filter_states(self, state: dict[str, Any]) -> None:
        """The driver's merged statistics, each connector's own on top."""
        for key, c in self._stateful():
            if state.get(key):
                c.set_state(state[key])

    def actions(self, rows: list[int], actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The module's actions of envs ``rows`` through the module-to-env pipeline:
        ``(actions to store, actions for the envs)``."""
        batch = {"actions": np.array(actions)}
        batch = self.module_to_env(rl_module=self.rl_module, batch=batch,
                                   episodes=[self.episodes[b] for b in rows],
                                   explore=self.explore, shared_data={}) or batch
        stored = np.asarray(batch["actions"], dtype=np.asarray(actions).dtype)
        if stored.shape != np.shape(actions):
            raise ValueError(f"module_to_env_connector: batch['actions'] came back with shape "
                             f"{stored.shape}, the module's were {np.shape(actions)}")
        for_env = np.asarray(batch.get("actions_for_env", stored))
        return stored, for_env


# --- on a learner ---

def run_learner_connector(pipeline: ConnectorPipelineV2, batches: dict[str, Any],
                          rl_module: Any = None, metrics: Any = None) -> dict[str, Any]:
    """``batches`` (``{policy_id: time-major columns}``) through the learner pipeline;
    episodes are views over them (column_episodes), writes go into the batches."""
    episodes = []
    for pid, batch in batches.items():
        if isinstance(batch, dict) and "rewards" in batch:
            for name in ("rewards", "obs"):  # writable, and theirs to change
                if name in batch and isinstance(batch[name], np.ndarray):
                    batch[name] = np.array(batch[name])
            views = column_episodes(batch, pipeline.input_observation_space,
                                    pipeline.input_action_space)
            for v in views:
                v.module_id = pid
            episodes.extend(views)
    out = pipeline(rl_module=rl_module, batch=batches, episodes=episodes, explore=False,
                   shared_data={}, metrics=metrics)
    return batches if out is None else out


def driver_observation_space(config: Any, obs_space: gym.Space, act_space: gym.Space) -> gym.Space:
    """The policies' observation space for the driver: the env-to-module pipeline's output
    for the env's spaces, its factory given one env built here (and closed)."""
    if configured(config, "env_to_module_connector") is None:
        return obs_space
    from rlmesh.env.registry import EnvContext, env_registry, make_env

    context = EnvContext(config.env_config, 0, 0, config.num_env_runners)
    env = make_env(config.to_dict()["env"], context, env_registry(), model=config.model,
                   preprocessor_pref=config.preprocessor_pref)
    try:
        return module_observation_space(config, env, obs_space, act_space)
    finally:
        env.close()


class ConnectorFilterStats:
    """The driver's global statistics of the runners' stateful env-to-module connectors
    (MeanStdFilter), by the connector's position in the pipeline: each runner's flushed
    statistics merged in, the result handed back to every runner (sync_filters), as the
    observation filter's are."""

    def __init__(self) -> None:
        from rlmesh.rl.filters import RunningStat

        self._cls = RunningStat
        self.stats: dict[str, Any] = {}

    def merge_buffer(self, update: dict[str, Any] | None) -> None:
        for key, data in (update or {}).items():
            if not data:
                continue
            stat = self._cls.from_data(data)
            if key in self.stats:
                self.stats[key].merge(stat)
            else:
                self.stats[key] = stat

    def get_state(self) -> dict[str, Any]:
        return {key: stat.to_data() for key, stat in self.stats.items()}

    def set_state(self, state: dict[str, Any] | None) -> None:
        self.stats = {key: self._cls.from_data(data) for key, data in (state or {}).items()}
