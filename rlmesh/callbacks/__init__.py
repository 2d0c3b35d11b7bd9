"""User hooks on episode and training events (RLlib's callback names), the ``Episode`` view
they receive, and the aggregation of their custom metrics and histograms. A callbacks class
(or RLlib's older dict of functions) crosses processes as import paths, built in each runner."""

from __future__ import annotations

import logging
import math
from typing import Any, Callable

from rlmesh.env.single_agent_episode import SingleAgentEpisode, _new_id
from rlmesh.runtime.import_path import import_object

log = logging.getLogger(__name__)


#: The agent id RLlib gives the one agent of a single-agent env.
SINGLE_AGENT_ID = "agent0"


class Episode(SingleAgentEpisode):
    """One episode of one env, as the callbacks see it while it runs: RLlib's new stack's
    ``SingleAgentEpisode`` (``get_observations(-1)``, ``custom_data``, ``len(episode)``,
    ``get_return()``...) and its older ``Episode``'s names.

    ``user_data`` is free for the callbacks' own state between steps; ``custom_metrics``
    (name -> number) is reported with the episode when it ends and averaged per training
    iteration (``<name>_mean``, ``_min``, ``_max``); ``hist_data`` (name -> list of numbers)
    goes into the result's ``hist_stats`` as RLlib's does, the lists of the episodes in the
    smoothing window joined. ``last_observation_for()`` and the other ``last_*_for`` are
    RLlib's accessors (the observation as the env returned it, before any filter; with
    env-to-module connectors configured, what they rewrote it to: they are handed this
    episode, as RLlib's are).

    The step history the ``get_*`` read is kept only with ``history=True``, which the
    samplers set where someone can read it (callbacks or connectors configured); without
    it an episode costs a counter update per step.
    """

    __slots__ = ("env_index", "episode_id", "length", "total_reward", "_last_obs",
                 "last_reward", "last_info", "last_action", "user_data", "custom_metrics",
                 "hist_data", "history", "_uid")
    #: Whether observations and infos are dicts by agent id (MultiAgentEpisode).
    per_agent = False

    def __init__(self, env_index: int, episode_id: int, observation: Any = None,
                 info: dict | None = None, *, history: bool = False) -> None:
        # Not SingleAgentEpisode.__init__: one of these per episode of every env, kept lean.
        self.env_index = env_index
        self.episode_id = episode_id
        self.length = 0  # steps taken so far
        self.total_reward = 0.0  # undiscounted, unclipped
        self._last_obs = observation
        self.last_reward: float | None = None
        self.last_info: dict = info or {}
        self.last_action: Any = None
        self.user_data: dict[str, Any] = {}
        self.custom_metrics: dict[str, float] = {}
        self.hist_data: dict[str, list[float]] = {}
        self.history = history
        self._uid = None
        self.agent_id = self.module_id = self.multi_agent_episode_id = None
        self.observation_space = self.action_space = None
        self.is_terminated = self.is_truncated = self.is_numpy = False
        self.t_started = self._lookback = 0
        self.custom_data = self.user_data  # RLlib's new name for the same dict
        self.extra_model_outputs: dict[str, list] = {}
        if history:
            self.observations = [] if observation is None else [observation]
            self.infos = [] if observation is None else [self.last_info]
            self.actions, self.rewards = [], []
        else:
            self.observations = self.infos = self.actions = self.rewards = None

    @property
    def id_(self) -> str:  # RLlib's unique string id; made when first asked for
        if self._uid is None:
            self._uid = _new_id()
        return self._uid

    @property
    def last_observation(self) -> Any:
        return self._last_obs

    @last_observation.setter
    def last_observation(self, observation: Any) -> None:
        """The current observation replaced (an autoreset vector env's first one)."""
        self._last_obs = observation
        if self.history:
            if self.observations:
                self.observations[-1] = observation
            else:
                self.observations.append(observation)
                self.infos.append(self.last_info)

    def add_env_reset(self, observation: Any, infos: dict | None = None) -> None:
        self._last_obs, self.last_info = observation, infos or {}
        if self.history:
            self.observations.append(observation)
            self.infos.append(self.last_info)

    def record_step(self, observation: Any, reward: float, info: dict,
                    action: Any = None, terminated: bool = False,
                    truncated: bool = False) -> None:
        self.length += 1
        self.total_reward += reward
        self._last_obs, self.last_reward, self.last_info = observation, reward, info
        self.last_action = action
        self.is_terminated, self.is_truncated = terminated, truncated
        if self.history:
            self.observations.append(observation)
            self.actions.append(action)
            self.rewards.append(reward)
            self.infos.append(info)

    def add_env_step(self, observation: Any, action: Any, reward: float,
                     infos: dict | None = None, *, terminated: bool = False,
                     truncated: bool = False, extra_model_outputs: dict | None = None) -> None:
        self.record_step(observation, reward, infos or {}, action, terminated, truncated)

    def __len__(self) -> int:
        return self.length

    def get_return(self, include_hanging_rewards: bool = False) -> float:
        return self.total_reward

    def _no_data(self, what: str) -> Exception:
        # The getters' and setters' error when no history is kept (their data is None).
        if what == "get":
            return RuntimeError(
                "this episode keeps no step history (only last_observation and the other "
                "last_*): the samplers keep it where callbacks or connectors are configured")
        return RuntimeError(f"{what}: this episode keeps no step history")

    def _set(self, data: Any, what: str, new_data: Any, at_indices: Any,
             lookback_neg: bool) -> None:
        super()._set(data, what, new_data, at_indices, lookback_neg)
        if what == "observations" and data:
            self._last_obs = data[-1]

    def set_rewards(self, *, new_data: Any, at_indices: Any = None,
                    neg_index_as_lookback: bool = False) -> None:
        old = sum(self.rewards) if self.rewards is not None else 0.0
        self._set(self.rewards, "rewards", new_data, at_indices, neg_index_as_lookback)
        self.total_reward += float(sum(self.rewards) - old)

    # RLlib's per-agent accessors; a single-agent episode has the one agent "agent0".
    def last_observation_for(self, agent_id: Any = SINGLE_AGENT_ID) -> Any:
        return self._for(self.last_observation, agent_id, "observation")

    def last_info_for(self, agent_id: Any = SINGLE_AGENT_ID) -> Any:
        return self._for(self.last_info, agent_id, "info")

    def last_reward_for(self, agent_id: Any = SINGLE_AGENT_ID) -> float | None:
        return self._for(self.last_reward, agent_id, "reward")

    def last_action_for(self, agent_id: Any = SINGLE_AGENT_ID) -> Any:
        return self._for(self.last_action, agent_id, "action")

    def _for(self, value: Any, agent_id: Any, what: str) -> Any:
        if self.per_agent:
            if not isinstance(value, dict):
                raise KeyError(f"a multi-agent episode keeps no last {what} per agent "
                               f"(only observations and infos); sum rewards in "
                               "episode.user_data from on_episode_step instead")
            return value.get(agent_id)
        if agent_id not in (SINGLE_AGENT_ID, None):
            raise KeyError(f"agent {agent_id!r}: a single-agent episode has one agent, "
                           f"{SINGLE_AGENT_ID!r} (call last_{what}_for() without an id)")
        return value

    def summary(self) -> dict[str, Any]:
        """What the fragment carries for a finished episode (plain data)."""
        out = {"return": float(self.total_reward), "length": int(self.length),
               "custom_metrics": _numbers(self.custom_metrics)}
        if self.hist_data:
            out["hist_data"] = _number_lists(self.hist_data)
        return out


def runner_metrics_logger(env_runner: Any) -> Any:
    """``env_runner.metrics`` when it is a MetricsLogger (an EnvRunner's), else a logger of
    the sampler's own (a sampler used without a runner, as tests do)."""
    from rlmesh.utils.metrics.metrics_logger import MetricsLogger

    logger = getattr(env_runner, "metrics", None)
    return logger if isinstance(logger, MetricsLogger) else MetricsLogger(track_pending=True)


def hook_arguments(sampler: Any, env_index: int, env: Any) -> dict[str, Any]:
    """The keyword arguments every episode hook of env ``env_index`` gets (RLlib's new
    stack's): ``env_runner``, ``env_index``, ``metrics_logger``, ``env`` (as the user's
    creator built it where the runner knows it), ``rl_module`` (the policy's model, or
    None). Made once per episode, not per step."""
    user_env = _user_env(sampler.env_runner, env_index) if sampler.env_runner is not sampler \
        else None
    policy = getattr(sampler, "policy", None)
    return {"env_runner": sampler.env_runner, "env_index": env_index,
            "metrics_logger": sampler.metrics_logger,
            "env": user_env if user_env is not None else env,
            "rl_module": getattr(policy, "model", None)}


def _numbers(metrics: dict[str, Any]) -> dict[str, float]:
    out = {}
    for name, value in metrics.items():
        try:
            out[str(name)] = float(value)
        except (TypeError, ValueError):
            log.warning("custom metric %r is %r, not a number: dropped", name, value)
    return out


def _number_lists(hist: dict[str, Any]) -> dict[str, list[float]]:
    out = {}
    for name, values in hist.items():
        try:
            out[str(name)] = [float(v) for v in values]
        except (TypeError, ValueError):
            log.warning("hist_data %r is %r, not a list of numbers: dropped", name, values)
    return out


class Callbacks:
    """Subclass and override what you need; every hook takes keyword arguments only and
    may ignore the ones it does not use (accept ``**kwargs`` to stay compatible).

    Where each runs: ``on_algorithm_init``, ``on_train_result``, ``on_evaluate_start/end``
    and ``on_checkpoint_loaded`` in the driver; the env, episode and sample hooks in the env
    runner process that steps the env (``env_runner`` is that EnvRunner:
    ``env_runner.worker_index``, ``env_runner.envs``; evaluation runners included,
    ``env_runner.in_evaluation`` True); ``on_learn_on_batch`` in the learner.

    RLlib's new stack's arguments come too: ``metrics_logger`` (the env runner's
    ``env_runner.metrics``, a MetricsLogger whose values reach ``result["env_runners"]``;
    in ``on_train_result`` the driver's ``algorithm.metrics``, reaching the result's top
    level), and for the episode hooks ``env`` (that index's env as the user's creator built
    it; the vector env under a vector sampler) and ``rl_module`` (the policy's model).
    ``episode`` is a ``SingleAgentEpisode`` (multi-agent: a ``MultiAgentEpisode``) whose
    ``get_observations(-1)`` and other getters read its steps so far. A method
    whose name is not a hook is an error (a misspelled hook would never run). Name the
    class by import path (``"my_pkg.cb:MyCallbacks"``) or pass it, defined at module
    level, to ``config.callbacks(...)``.
    """

    def on_algorithm_init(self, *, algorithm: Any, **kwargs: Any) -> None:
        """In the driver, once every process is up and the first weights are published."""

    def on_environment_created(self, *, env_runner: Any, env: Any, env_context: Any,
                               **kwargs: Any) -> None:
        """After an env runner made one of its envs (again after an env was recreated)."""

    def on_episode_created(self, *, episode: Episode, env_runner: Any, env_index: int,
                           **kwargs: Any) -> None:
        """Before the env's reset that starts ``episode`` (it has no observation yet)."""

    def on_episode_start(self, *, episode: Episode, env_runner: Any, env_index: int,
                         **kwargs: Any) -> None:
        """After the env's reset; ``episode.last_observation`` is the first observation."""

    def on_episode_step(self, *, episode: Episode, env_runner: Any, env_index: int,
                        **kwargs: Any) -> None:
        """After each step, the last one included (before ``on_episode_end``)."""

    def on_episode_end(self, *, episode: Episode, env_runner: Any, env_index: int,
                       **kwargs: Any) -> None:
        """When the episode terminated or was truncated; set ``episode.custom_metrics`` here."""

    def on_postprocess_trajectory(self, *, env_runner: Any, policy_id: str, policies: dict,
                                  postprocessed_batch: dict, **kwargs: Any) -> None:
        """In the env runner, on each fragment before it ships: its time-major ``[T, B]``
        columns, which may be changed in place (rewards reshaped, say). Returns and
        advantages are computed later, on the learner, from what this leaves."""

    def on_sample_end(self, *, env_runner: Any, samples: dict, **kwargs: Any) -> None:
        """In the env runner, after each fragment (``samples``) is complete."""

    def on_learn_on_batch(self, *, policy: Any, train_batch: dict, result: dict,
                          **kwargs: Any) -> None:
        """In the learner, before ``policy`` updates on ``train_batch``; keys put in
        ``result`` join the policy's statistics (info/learner/<policy id>)."""

    def on_train_result(self, *, algorithm: Any, result: dict, **kwargs: Any) -> None:
        """In the driver, after each training iteration (its evaluation included); may add
        keys to ``result``."""

    def on_evaluate_start(self, *, algorithm: Any, **kwargs: Any) -> None:
        """In the driver, before an evaluation."""

    def on_evaluate_end(self, *, algorithm: Any, evaluation_metrics: dict,
                        **kwargs: Any) -> None:
        """In the driver, after an evaluation; ``evaluation_metrics`` may be changed."""

    def on_checkpoint_loaded(self, *, algorithm: Any, **kwargs: Any) -> None:
        """In the driver, after ``algorithm.restore()`` loaded a checkpoint."""


HOOKS = tuple(name for name in vars(Callbacks) if name.startswith("on_"))


def check_hooks(cls: type) -> None:
    """ConfigError naming the closest hook for a public method of ``cls`` (below Callbacks)
    that is not one: ``on_episode_ended`` would otherwise never be called. Helpers of the
    class are fine when their name neither starts with ``on_`` nor nearly spells a hook."""
    import difflib

    from rlmesh.config.settings import ConfigError

    for klass in cls.__mro__:
        if klass is Callbacks or not issubclass(klass, Callbacks):
            continue
        for name, value in vars(klass).items():
            if not callable(value) or name.startswith("_") or name in HOOKS:
                continue
            close = difflib.get_close_matches(name, HOOKS, n=1, cutoff=0.5)
            near = difflib.get_close_matches(name, HOOKS, n=1, cutoff=0.8)
            if not name.startswith("on_") and not near:
                continue  # the class's own helper ("episode_ended" is still caught)
            hint = f"did you mean {close[0]!r}?" if close else f"the hooks are {', '.join(HOOKS)}"
            raise ConfigError(f"callbacks {cls.__qualname__}.{name} is not a callback hook, "
                            f"so it would never be called; {hint}")


DefaultCallbacks = Callbacks  # RLlib's older name


def load_callbacks(callbacks: str | type | dict | None) -> Callbacks | None:
    """An instance of the callbacks class named by ``callbacks`` (RLlib's older dict of
    functions: a ``FunctionCallbacks``), or None."""
    if callbacks is None:
        return None
    if isinstance(callbacks, dict) and HOOK_FUNCTIONS in callbacks:
        base = load_callbacks(callbacks.get("class"))
        return HookFunctions(base, callbacks[HOOK_FUNCTIONS])
    if isinstance(callbacks, dict):
        return FunctionCallbacks.from_dict(callbacks)
    cls = import_object(callbacks, "callbacks class") if isinstance(callbacks, str) else callbacks
    if not (isinstance(cls, type) and issubclass(cls, Callbacks)):
        raise TypeError(f"callbacks {callbacks!r} is {cls!r}, not a subclass of "
                        "rlmesh.callbacks.Callbacks")
    check_hooks(cls)
    return cls()


#: The key under which ``config.callbacks(on_episode_end=fn, ...)`` keeps its functions.
HOOK_FUNCTIONS = "hook_functions"


def hook_functions_setting(callbacks_class: Any, functions: dict[str, Any]) -> dict[str, Any]:
    """RLlib 2.40's ``config.callbacks(callbacks_class, on_episode_end=fn, ...)`` as one
    setting: the class (or None) and, by hook, its functions as import paths (a lambda as
    a token this machine's processes are handed). One line for a name that is no hook."""
    import difflib

    from rlmesh.config.multi_agent import function_path
    from rlmesh.config.settings import ConfigError

    out: dict[str, list[str]] = {}
    for hook, fns in functions.items():
        if hook not in HOOKS:
            close = difflib.get_close_matches(hook, HOOKS, n=1, cutoff=0.5)
            hint = f"did you mean {close[0]!r}?" if close else f"the hooks are {', '.join(HOOKS)}"
            raise ConfigError(f"callbacks: {hook}= is not a callback hook; {hint}")
        if fns is None:
            continue
        for fn in fns if isinstance(fns, (list, tuple)) else [fns]:
            if not (callable(fn) or isinstance(fn, str)):
                raise ConfigError(f"callbacks: {hook} is {fn!r}, not a function")
            out.setdefault(hook, []).append(fn if isinstance(fn, str)
                                            else function_path(fn, f"callbacks {hook}"))
    if isinstance(callbacks_class, dict) and HOOK_FUNCTIONS in callbacks_class:
        merged = {k: list(v) for k, v in callbacks_class[HOOK_FUNCTIONS].items()}
        for hook, paths in out.items():
            merged.setdefault(hook, []).extend(paths)
        return {"class": callbacks_class.get("class"), HOOK_FUNCTIONS: merged}
    return {"class": callbacks_class, HOOK_FUNCTIONS: out}


class HookFunctions(Callbacks):
    """A callbacks class (or none) with functions run after each of its hooks, each
    called with the hook's keyword arguments (RLlib 2.40's ``config.callbacks(
    on_episode_end=fn)``: ``def fn(*, episode, metrics_logger, **kwargs)``)."""

    def __init__(self, base: Callbacks | None, functions: dict[str, list[str]]) -> None:
        self.base = base
        self.functions = {hook: [import_object(f, f"callbacks {hook}") if isinstance(f, str)
                                 else f for f in fns] for hook, fns in functions.items()}

    def _run(self, hook: str, kwargs: dict[str, Any]) -> None:
        if self.base is not None:
            getattr(self.base, hook)(**kwargs)
        for fn in self.functions.get(hook, ()):
            fn(**kwargs)


def _forward_hook(name: str) -> Callable[..., None]:
    def hook(self: HookFunctions, **kwargs: Any) -> None:
        self._run(name, kwargs)

    hook.__name__ = hook.__qualname__ = name
    return hook


for _name in HOOKS:
    setattr(HookFunctions, _name, _forward_hook(_name))


#: The keys of RLlib's older ``"callbacks": {...}`` dict, each a function of one info dict.
FUNCTION_HOOKS = ("on_episode_start", "on_episode_step", "on_episode_end", "on_sample_end",
                  "on_postprocess_traj", "on_train_result")


class FunctionCallbacks(Callbacks):
    """RLlib's older callbacks, ``{"on_episode_start": fn, ...}``, each ``fn(info)`` taking
    one dict, on today's hooks (today's spelling: a ``Callbacks`` subclass). The info keys:

    - on_episode_start / on_episode_end: ``env`` (the env as the user built it), ``episode``,
      ``policy`` (the runner's policies by id); on_episode_step: ``env``, ``episode``;
    - on_sample_end: ``worker`` (the env runner), ``samples`` (the fragment);
    - on_postprocess_traj: ``post_batch`` (the fragment's time-major columns, changeable in
      place), ``pre_batch`` ``(policy, post_batch)``, ``policy_id``, ``worker``; it runs
      once per fragment, not per episode and agent as RLlib's did;
    - on_train_result, in the driver: ``trainer`` (the algorithm), ``result``.

    The functions cross processes as their import paths (a lambda or a local function, as
    runtime/handed.py hands it to this machine's processes)."""

    def __init__(self, functions: dict[str, Callable[[dict], Any]]) -> None:
        self.functions = functions

    @classmethod
    def from_dict(cls, callbacks: dict[str, Any]) -> FunctionCallbacks | None:
        """The functions of ``callbacks`` (import paths resolved; None values skipped, as
        RLlib's defaults have them); None if there is none. ConfigError for a key that is
        not a hook and for a value that is not a function."""
        from rlmesh.config.settings import ConfigError

        functions = {}
        for key, value in callbacks.items():
            if key not in FUNCTION_HOOKS:
                raise ConfigError(f"callbacks: {key!r} is not a callback of the dict form; its "
                                  f"keys are {', '.join(FUNCTION_HOOKS)} (or name a "
                                  "rlmesh.callbacks.Callbacks subclass for the other hooks)")
            if value is None:
                continue
            fn = import_object(value, f"callbacks {key}") if isinstance(value, str) else value
            if not callable(fn):
                raise ConfigError(f"callbacks: {key} is {value!r}, not a function of one info "
                                  "dict (def f(info): ...)")
            functions[key] = fn
        return cls(functions) if functions else None

    def _invoke(self, hook: str, **info: Any) -> None:
        fn = self.functions.get(hook)
        if fn is not None:
            fn(info)

    def on_episode_start(self, *, episode: Episode, env_runner: Any, env_index: int,
                         **kwargs: Any) -> None:
        self._invoke("on_episode_start", env=_user_env(env_runner, env_index), episode=episode,
                   policy=getattr(env_runner, "policies", {}))

    def on_episode_step(self, *, episode: Episode, env_runner: Any, env_index: int,
                        **kwargs: Any) -> None:
        self._invoke("on_episode_step", env=_user_env(env_runner, env_index), episode=episode)

    def on_episode_end(self, *, episode: Episode, env_runner: Any, env_index: int,
                       **kwargs: Any) -> None:
        self._invoke("on_episode_end", env=_user_env(env_runner, env_index), episode=episode,
                   policy=getattr(env_runner, "policies", {}))

    def on_sample_end(self, *, env_runner: Any, samples: dict, **kwargs: Any) -> None:
        self._invoke("on_sample_end", worker=env_runner, samples=samples)

    def on_postprocess_trajectory(self, *, env_runner: Any, policy_id: str, policies: dict,
                                  postprocessed_batch: dict, **kwargs: Any) -> None:
        self._invoke("on_postprocess_traj", post_batch=postprocessed_batch,
                   pre_batch=(policies.get(policy_id), postprocessed_batch),
                   policy_id=policy_id, worker=env_runner)

    def on_train_result(self, *, algorithm: Any, result: dict, **kwargs: Any) -> None:
        self._invoke("on_train_result", trainer=algorithm, result=result)


def _user_env(env_runner: Any, index: int) -> Any:
    """Env ``index`` of the runner as the user's creator built it (rlmesh's wrappers off)."""
    user_envs = getattr(env_runner, "user_envs", None)
    envs = user_envs if user_envs is not None else getattr(env_runner, "envs", [])
    return envs[index] if index < len(envs) else None


def summarize_custom_metrics(metrics: list[dict[str, float]]) -> dict[str, float]:
    """``{"<name>_mean", "<name>_min", "<name>_max"}`` over the episodes' custom metrics;
    a name absent from some episodes is summarised over those that have it, and NaNs are
    left out (a name that is only NaN gives NaN)."""
    values: dict[str, list[float]] = {}
    for m in metrics:
        for name, value in m.items():
            values.setdefault(name, []).append(float(value))
    out: dict[str, float] = {}
    for name, vs in values.items():
        finite = [v for v in vs if not math.isnan(v)] or [math.nan]
        out[f"{name}_mean"] = sum(finite) / len(finite)
        out[f"{name}_min"] = min(finite)
        out[f"{name}_max"] = max(finite)
    return out


def summarize_hist_data(episodes: Any) -> dict[str, list[float]]:
    """RLlib's ``hist_stats``: ``episode_reward`` and ``episode_lengths`` of ``episodes``
    (the smoothing window) and each name of their ``hist_data``, the lists joined."""
    out: dict[str, list[float]] = {"episode_reward": [], "episode_lengths": []}
    for e in episodes:
        out["episode_reward"].append(float(e["return"]))
        out["episode_lengths"].append(int(e["length"]))
        for name, values in (e.get("hist_data") or {}).items():
            out.setdefault(name, []).extend(values)
    return out
