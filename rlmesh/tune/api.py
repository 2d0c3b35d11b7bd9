"""``rlmesh.tune.run(...)`` and ``Tuner(...).fit()``: an experiment's trials made from its
search space, placed on this machine's resources, run by controller.Sweep, and returned
as an ExperimentAnalysis. ``--resume`` reads the experiment folder's state file back."""

from __future__ import annotations

import copy
import inspect
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rlmesh.results import DEFAULT_LOCAL_DIR, safe_name
from rlmesh.tune.analysis import ExperimentAnalysis
from rlmesh.tune.trial import DONE, ERROR, PENDING, RUNNING, Trial, param_tag, read_state

DEFAULT_METRIC = "episode_reward_mean"


def local_nodes() -> list:
    """This machine as the scheduler sees a node (CPUs this process may use, GPUs, memory)."""
    from rlmesh.placement.node_resources import detect_resources
    from rlmesh.placement.scheduler import Node

    return [Node("local", detect_resources())]


def _trainable(run: Any) -> tuple[str, Callable | None]:
    """(name stored in the state file, the function) for a function trainable; (algorithm
    name, None) for an algorithm."""
    if callable(run) and not inspect.isclass(run):
        return f"{run.__module__}:{run.__qualname__}", run
    if isinstance(run, str) and ":" in run:
        import importlib

        module, _, name = run.partition(":")
        obj = getattr(importlib.import_module(module), name)
        if callable(obj) and not inspect.isclass(obj):
            return run, obj
    if inspect.isclass(run):  # a class of the script by its file (runtime/import_path.py)
        from rlmesh.policy.policy import class_path

        return class_path(run), None
    return str(run), None


def run(run_or_experiment: Any, *, config: dict | None = None, stop: dict | None = None,
        num_samples: int = 1, metric: str | None = None, mode: str = "max",
        search_alg: str | None = None, scheduler: Any = None, max_concurrent_trials: int | None = None,
        resources_per_trial: dict | None = None, name: str | None = None,
        local_dir: str | None = None, storage_path: str | None = None, checkpoint_freq: int = 0,
        resume: bool = False, seed: int | None = None, grace_period: int = 1,
        reduction_factor: int = 3, max_t: int | None = None, nodes: list | None = None,
        verbose: int = 1, print_every_s: float = 15.0,
        cluster_file: str | None = None, join_cluster: str | None = None,
        callbacks: Any = None, raise_on_failed_trial: bool = True) -> ExperimentAnalysis:
    """Run a sweep of ``run_or_experiment`` (an algorithm name such as "PPO", or a function
    ``fn(config)`` calling rlmesh.tune.report, or Tune's older ``fn(config, reporter)``
    calling ``reporter(**metrics)``) over ``config``'s search spaces.

    ``raise_on_failed_trial`` (Ray Tune's): a run any of whose trials failed raises
    ``TuneError`` naming them, once every trial ended (False: the analysis is returned).
    ``resources_per_trial``: ``{"cpu": 1, "gpu": 0, "extra_cpu": 2}`` (or the scheduler's
    ``CPU``/``GPU``), each value a number or a function of the trial's spec
    (``lambda spec: spec.config.num_workers``); for an algorithm it replaces the config's
    own request. A class or function in an algorithm's config (the env class, callbacks)
    travels by its import path (a lambda: handed to this machine's processes).

    ``scheduler``: None, "asha" or "median" (Optuna's pruners), or a PopulationBasedTraining.
    ``max_t``: the iteration at which a pruned sweep's trials stop, TERMINATED (Ray's ASHA
    max_t); by default the stop criterion's training_iteration, where there is one.
    ``search_alg``: None (grid and random draws), "optuna"/"tpe" or "optuna_random".
    Trials run as many at a time as their resource requests fit ``nodes`` (this machine by
    default) and ``max_concurrent_trials`` allow. Nested metric keys are written with "/".
    ``cluster_file`` (``rlmesh launch`` passes it, with the cluster's ``nodes``): each trial's
    driver runs here, on the head, and its actors on the nodes the scheduler gave it, joined
    to them by ``join_cluster``, the import path of the launcher's ``fn(cluster, trial_id)
    -> session`` (tune sits below the launcher and names it only by that path).
    ``callbacks``: experiment trackers, ``[WandbLoggerCallback(project=...)]`` or
    ``{"mlflow": {"tracking_uri": ...}}`` (rlmesh/tune/trackers.py), one tracker run per
    trial grouped by the experiment; algorithm trials only.
    """
    from rlmesh.runtime.import_path import stop_if_importing_script
    from rlmesh.tune.controller import Sweep
    from rlmesh.tune.pbt import PopulationBasedTraining

    stop_if_importing_script("tune.run(...)")  # a trial's process importing the script
    from rlmesh.tune.search import Search
    from rlmesh.tune.table import TrialTable

    run_name, fn = _trainable(run_or_experiment)
    from rlmesh.tune.trackers import normalize, require_packages

    trackers = normalize(callbacks, "callbacks")
    require_packages(trackers)
    if cluster_file is not None and fn is not None:
        raise ValueError("a function trainable runs on a thread of the sweep; on a cluster "
                         "only algorithm trials run (give an algorithm name)")
    metric = metric or (scheduler.metric if isinstance(scheduler, PopulationBasedTraining)
                        and scheduler.metric else DEFAULT_METRIC)
    env_name = _env_name(config)
    config, stop = _config_and_stop(run_name, fn, config, stop)
    pbt = scheduler if isinstance(scheduler, PopulationBasedTraining) else None
    if pbt is not None:
        pbt.metric, pbt.mode = metric, mode
    max_t = _max_t(max_t, stop)
    search = Search(config, num_samples, search_alg, None if pbt else scheduler, metric, mode,
                    seed, grace_period, reduction_factor, max_t)
    short = safe_name(run_name.rsplit(":", 1)[-1])
    prefix = short + (f"_{safe_name(env_name)}" if env_name else "")
    root = Path(os.path.expanduser(str(storage_path or local_dir or DEFAULT_LOCAL_DIR)))
    experiment = name or _default_experiment(root, prefix, resume)
    exp_dir = root / safe_name(experiment)
    trials = _resumed_trials(exp_dir) if resume else []
    if not resume and (exp_dir / "experiment_state.json").exists():
        raise FileExistsError(f"{exp_dir} holds a sweep already: resume it (--resume, "
                              "resume=True) or give another name")
    exp_dir.mkdir(parents=True, exist_ok=True)
    make_trial = _TrialMaker(search, prefix, experiment, run_name, stop, exp_dir)
    search.replay(trials)
    if not search.optuna_search:  # every trial known now: the table and state list them
        trials += [make_trial(i) for i in range(len(trials), search.total)]
    table = TrialTable(metric, print_every_s=print_every_s, verbose=verbose)
    table.message(f"rlmesh tune: {search.total} trials of {run_name} in {exp_dir}"
                  f"{' (resumed)' if resume else ''}")
    sweep = Sweep(exp_dir, trials, search.total, make_trial,
                  _requester(run_name, fn, resources_per_trial, cluster_file is not None), fn,
                  search, pbt, metric, mode, table, nodes or local_nodes(),
                  max_concurrent_trials, checkpoint_freq,
                  meta={"run": run_name, "experiment": experiment}, cluster_file=cluster_file,
                  join_cluster=join_cluster, trackers=trackers)
    finished = sweep.run()
    analysis = ExperimentAnalysis(sweep.trials, metric, mode, exp_dir, interrupted=not finished)
    (exp_dir / "summary.txt").write_text(analysis.summary() + "\n")
    table.message("\n".join(analysis.best_lines()))
    failed = [t for t in sweep.trials if t.status == ERROR]
    if failed and raise_on_failed_trial and finished:
        from rlmesh.tune.legacy import failed_trials_error

        raise failed_trials_error(failed, analysis)
    return analysis


def _env_name(config: Any) -> str | None:
    """The env's name for the experiment's folder: a class or function by its name."""
    env = config.get("env") if isinstance(config, dict) else getattr(config, "env", None)
    return getattr(env, "__name__", None) or (str(env) if env else None)


def _max_t(max_t: int | None, stop: dict) -> int | None:
    """The last iteration of every trial: ``max_t`` (added to ``stop``) or stop's own."""
    if max_t is None:
        return stop.get("training_iteration")
    if int(max_t) < 1:
        raise ValueError(f"max_t must be a positive number of iterations, not {max_t!r}")
    stop["training_iteration"] = min(int(max_t), stop.get("training_iteration", max_t))
    return stop["training_iteration"]


def _default_experiment(root: Path, prefix: str, resume: bool) -> str:
    """``<prefix>_<date>`` for a new sweep; to resume, the newest such sweep under ``root``."""
    if not resume:
        from rlmesh.results import date_str

        return f"{prefix}_{date_str()}"
    found = sorted(root.glob(f"{prefix}_*/experiment_state.json"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise FileNotFoundError(f"nothing to resume: no sweep {prefix}_* under {root}; give "
                                "its name (--experiment-name, name=)")
    return found[-1].parent.name


def _config_and_stop(run_name: str, fn, config: dict | None, stop: dict | None):
    """The config with an algorithm's key spellings made canonical, and the stop criteria
    (an algorithm's default when none: `rlmesh train`'s)."""
    if hasattr(config, "fields_table"):  # an AlgorithmConfig built with spaces in it
        config = _config_object_dict(config)
    config = dict(config or {})
    if fn is not None:  # a function trainable stops itself, or at one of these
        from rlmesh.results import flatten

        return config, flatten(stop or {})
    from rlmesh.tune.experiment import DEFAULT_STOP, canonical_keys, config_class, parse_stop

    config = _plain_code(canonical_keys(config_class(run_name), config))
    return config, (parse_stop(stop, "stop") if stop else dict(DEFAULT_STOP))


def _plain_code(value: Any) -> Any:
    """``value`` with each class or function in it (an env class, RLlib's callbacks dict of
    functions) as its import path, or the token a lambda is handed to this machine's
    processes by (runtime/handed.py): an algorithm trial's config crosses to its process,
    and into params.json, as plain data. Search spaces stay as they are."""
    import types

    from rlmesh.config.base import _jsonable

    if isinstance(value, dict):
        return {k: _plain_code(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain_code(v) for v in value)
    if isinstance(value, (type, types.FunctionType)):
        return _jsonable(value)
    return value


def _config_object_dict(cfg) -> dict:
    """``cfg.to_dict()``, except that search spaces stay as they are (to_dict refuses them),
    so ``PPOConfig().training(lr=tune.grid_search([...]))`` can be swept as in RLlib."""
    import dataclasses

    from rlmesh.config.base import _jsonable
    from rlmesh.tune.spaces import Domain

    def plain(value):
        if isinstance(value, Domain):
            return value
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return _jsonable(value)

    return {f.metadata["key"] or f.name: plain(getattr(cfg, f.name))
            for f in dataclasses.fields(cfg)}


class _TrialMaker:
    """Trial ``index``'s record: its config from the search, its folder named by its values."""

    def __init__(self, search, prefix: str, experiment: str, run_name: str, stop: dict,
                 exp_dir: Path):
        self.search, self.prefix, self.experiment = search, prefix, experiment
        self.run_name, self.stop, self.exp_dir = run_name, stop, exp_dir

    def __call__(self, index: int) -> Trial:
        config, params, number = self.search.config(index)
        trial_id = f"{self.prefix}_{index:05d}"
        tag = param_tag(params)
        return Trial(trial_id=trial_id, experiment=self.experiment, run=self.run_name,
                     config=config, stop=self.stop, params=params, optuna_number=number,
                     dir=str(self.exp_dir / (f"{trial_id}_{tag}" if tag else trial_id)))


def _requester(run_name: str, fn, resources_per_trial: dict | None, on_cluster: bool = False):
    """trial -> the placement groups it asks for: its config's resource_request() for an
    algorithm, ``resources_per_trial`` (default 1 CPU) for a function. On a cluster the
    driver's bundles are left out, as the launch's session leaves them: the head runs it."""
    def request(trial: Trial):
        from rlmesh.runtime.resources import Bundle, PlacementGroup
        from rlmesh.tune.legacy import trial_resources

        if resources_per_trial is not None or fn is not None:
            asked = trial_resources(resources_per_trial or {"CPU": 1}, trial)
            return [PlacementGroup((Bundle(asked, "trial"),), "PACK", trial.trial_id)]
        from rlmesh.tune.experiment import config_class

        cfg = config_class(run_name).from_dict(copy.deepcopy(trial.config))
        cfg.validate()
        groups = cfg.resource_request()
        if on_cluster:
            groups = [PlacementGroup(bundles, g.strategy, g.name) for g in groups
                      if (bundles := tuple(b for b in g.bundles if b.label != "driver"))]
        return groups

    return request


def _resumed_trials(exp_dir: Path) -> list[Trial]:
    """The state file's trials: finished ones kept, running ones to go on from their newest
    checkpoint, pending ones to start."""
    trials, _ = read_state(exp_dir)
    for t in trials:
        if t.status == RUNNING:
            t.status, t.restore_from = PENDING, t.last_checkpoint or t.restore_from
        if t.status not in DONE:
            t.optuna_number = None
    return trials


@dataclass
class TuneConfig:
    """Ray Tune's TuneConfig, the fields rlmesh reads."""

    metric: str | None = None
    mode: str = "max"
    num_samples: int = 1
    search_alg: str | None = None
    scheduler: Any = None
    max_concurrent_trials: int | None = None
    seed: int | None = None


@dataclass
class RunConfig:
    name: str | None = None
    storage_path: str | None = None
    stop: dict | None = None
    checkpoint_freq: int = 0
    verbose: int = 1
    callbacks: list | None = None  # experiment trackers (WandbLoggerCallback, ...)


@dataclass
class Tuner:
    """``Tuner("PPO", param_space={...}, tune_config=TuneConfig(...)).fit()``."""

    trainable: Any
    param_space: dict = field(default_factory=dict)
    tune_config: TuneConfig = field(default_factory=TuneConfig)
    run_config: RunConfig = field(default_factory=RunConfig)
    resources_per_trial: dict | None = None

    def fit(self, resume: bool = False) -> ExperimentAnalysis:
        tc, rc = self.tune_config, self.run_config
        return run(self.trainable, config=self.param_space, stop=rc.stop,
                   num_samples=tc.num_samples, metric=tc.metric, mode=tc.mode,
                   search_alg=tc.search_alg, scheduler=tc.scheduler,
                   max_concurrent_trials=tc.max_concurrent_trials, seed=tc.seed,
                   resources_per_trial=self.resources_per_trial, name=rc.name,
                   storage_path=rc.storage_path, checkpoint_freq=rc.checkpoint_freq,
                   resume=resume, verbose=rc.verbose, callbacks=rc.callbacks,
                   raise_on_failed_trial=False)  # Ray's fit() returns errors, not raises
