"""Ray Tune's older spellings on today's ``rlmesh.tune``: ``tune.function(f)``, trainables
``fn(config, reporter)``, ``resources_per_trial`` in lowercase keys with values that are
functions of the trial's spec, and ``TuneError`` for a run whose trials failed."""

from __future__ import annotations

import inspect
from typing import Any, Callable


class TuneError(Exception):
    """Trials of ``tune.run`` failed (``raise_on_failed_trial=True``, the default, as in Ray
    Tune); ``trials`` are their records, ``analysis`` the whole run's."""

    def __init__(self, message: str, trials: list | None = None, analysis: Any = None) -> None:
        super().__init__(message)
        self.trials = trials or []
        self.analysis = analysis


def function(f: Callable[..., Any]) -> Callable[..., Any]:
    """``f`` itself. Old Ray Tune needed ``tune.function(f)`` to keep a function in a config
    from being called as a search space; rlmesh never calls config values, so this is not
    needed (kept so that scripts that write it run)."""
    return f


def failed_trials_error(trials: list, analysis: Any) -> TuneError:
    """The one-line TuneError naming each failed trial and its error's last line."""
    parts = [f"{t.trial_id} ({_last_line(t.error)})" for t in trials]
    where = f"; their logs are under {analysis.experiment_dir}" if analysis.experiment_dir else ""
    return TuneError(f"{len(trials)} of {len(analysis.trials)} trials did not complete: "
                     f"{', '.join(parts)}{where} (raise_on_failed_trial=False returns the "
                     "analysis instead)", trials, analysis)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in str(text or "").splitlines() if line.strip()]
    return lines[-1][:200] if lines else "no error text"


# --- function trainables of the older form: fn(config, reporter) ---

def takes_reporter(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` is Tune's older ``fn(config, reporter)`` (two positional parameters)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.name == "reporter" for p in params)


class Reporter:
    """The ``reporter`` of ``fn(config, reporter)``: ``reporter(**metrics)`` reports one
    iteration, as ``rlmesh.tune.report(metrics)`` does (today's spelling); it returns when
    the sweep lets the trial go on, and ends the function (StopTrial) when it stops it."""

    def __init__(self, report: Callable[[dict], None]) -> None:
        self._report = report

    def __call__(self, _metrics: dict | None = None, **metrics: Any) -> None:
        self._report({**(_metrics or {}), **metrics})


# --- resources_per_trial as Tune spelled it ---

_CANONICAL = {"cpu": "CPU", "gpu": "GPU", "extra_cpu": "CPU", "extra_gpu": "GPU"}
_CUSTOM = ("custom_resources", "extra_custom_resources")
_UNPLACED = ("memory", "object_store_memory", "extra_memory", "extra_object_store_memory")


class ConfigView(dict):
    """A trial's config with attribute access (``spec.config.num_gpus``), as Tune gave it
    to the functions of ``resources_per_trial``."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"spec.config has no {name!r}; the trial's config keys are "
                                 f"{', '.join(sorted(map(str, self)))}") from None


class TrialSpec:
    """What a ``resources_per_trial`` function is given: ``spec.config``, ``spec.trial_id``."""

    def __init__(self, trial: Any) -> None:
        self.config = ConfigView(trial.config)
        self.trial_id = trial.trial_id


def trial_resources(resources: dict[str, Any], trial: Any) -> dict[str, float]:
    """The resources a trial asks for: ``resources`` (``resources_per_trial``) with Tune's
    lowercase keys (``cpu``, ``gpu``, ``extra_cpu``, ``extra_gpu`` added to them,
    ``custom_resources``) made the scheduler's, and each function of the trial's spec
    called. A key it cannot honour is one line."""
    out: dict[str, float] = {}
    spec = None
    for key, value in resources.items():
        if callable(value):
            spec = spec or TrialSpec(trial)
            value = value(spec)
        if key in _CUSTOM:
            items = dict(value or {}).items()
        elif key in _UNPLACED:
            if value:
                raise ValueError(f"resources_per_trial: {key}={value!r}: rlmesh's scheduler "
                                 "places CPUs, GPUs and custom resources, not memory; leave "
                                 f"{key} out")
            continue
        elif key in _CANONICAL:
            items = [(_CANONICAL[key], value)]
        elif key.islower():
            raise ValueError(f"resources_per_trial: unknown key {key!r}; write cpu, gpu, "
                             "extra_cpu, extra_gpu or custom_resources (or a resource's own "
                             "name: CPU, GPU, ...)")
        else:
            items = [(key, value)]
        for name, amount in items:
            if isinstance(amount, bool) or not isinstance(amount, (int, float)):
                raise ValueError(f"resources_per_trial: {key} must be a number (or a function "
                                 f"of the trial's spec giving one), got {amount!r}")
            out[name] = out.get(name, 0.0) + float(amount)
    return out
