"""Callbacks given as functions: RLlib 2.40's ``config.callbacks(cls, on_episode_end=fn)``
(``HookFunctions``: each function called with its hook's keyword arguments) and the older
``{"on_episode_end": fn}`` dict (``FunctionCallbacks``: each function of one info dict)."""

from __future__ import annotations

from typing import Any, Callable

from rlmesh.callbacks.base import HOOKS, Callbacks
from rlmesh.callbacks.episode import Episode
from rlmesh.runtime.import_path import import_object


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
