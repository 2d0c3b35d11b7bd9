"""User hooks on episode and training events (RLlib's callback names): the class users
subclass (base.py), the episode it receives and the aggregation of its metrics
(episode.py), hooks given as functions (functions.py). A callbacks class (or functions)
crosses processes as import paths, built in each runner (``load_callbacks``)."""

from __future__ import annotations

from typing import Any

from rlmesh.callbacks.base import HOOKS, Callbacks, DefaultCallbacks, check_hooks
from rlmesh.callbacks.episode import (SINGLE_AGENT_ID, Episode, summarize_custom_metrics,
                                      summarize_hist_data)
from rlmesh.callbacks.functions import (FUNCTION_HOOKS, HOOK_FUNCTIONS, FunctionCallbacks,
                                        HookFunctions, _user_env, hook_functions_setting)
from rlmesh.runtime.import_path import import_object

__all__ = ["FUNCTION_HOOKS", "HOOKS", "HOOK_FUNCTIONS", "SINGLE_AGENT_ID", "Callbacks",
           "DefaultCallbacks", "Episode", "FunctionCallbacks", "HookFunctions", "check_hooks",
           "hook_arguments", "hook_functions_setting", "load_callbacks",
           "runner_metrics_logger", "summarize_custom_metrics", "summarize_hist_data"]


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
