"""Which configs the trials get (grid points x num_samples, the rest drawn at random or by
Optuna's TPE / random sampler) and Optuna's pruners (median, successive halving = ASHA)
judging trials as they report. Optuna is imported only here, only when asked for."""

from __future__ import annotations

import copy
import random
from typing import Any

from rlmesh.extras import require
from rlmesh.tune import spaces

SEARCHERS = ("variant", "optuna", "tpe", "optuna_random")
PRUNERS = ("median", "asha")


class Search:
    """Trial configs in order, and the Optuna study (when a searcher or pruner needs one)."""

    def __init__(self, param_space: dict, num_samples: int = 1, search_alg: str | None = None,
                 scheduler: str | None = None, metric: str | None = None, mode: str = "max",
                 seed: int | None = None, grace_period: int = 1, reduction_factor: int = 3,
                 max_t: int | None = None):
        search_alg = (search_alg or "variant").lower()
        if search_alg not in SEARCHERS:
            raise ValueError(f"search_alg {search_alg!r} is not one of {', '.join(SEARCHERS)}")
        self.variants = spaces.grid_variants(param_space)
        self.num_samples = int(num_samples)
        self.total = len(self.variants) * self.num_samples
        self.rng = random.Random(seed)
        self.metric, self.mode = metric, mode
        self.optuna_search = search_alg != "variant"
        self.pruning = scheduler in PRUNERS
        self.max_t = max_t  # a trial's last iteration: it ends there TERMINATED, never pruned
        self.study = None
        self.live: dict[int, Any] = {}  # optuna trial number -> its Trial
        if self.optuna_search or self.pruning:
            if metric is None:
                raise ValueError("Optuna search and pruning need a metric (and mode) to judge "
                                 "trials by")
            self.study = _make_study(search_alg, scheduler, mode, seed, grace_period,
                                     reduction_factor)

    def config(self, index: int) -> tuple[dict, dict, int | None]:
        """The config of trial ``index``: (config, searched values, optuna trial number)."""
        variant, grid_params = self.variants[index % len(self.variants)]
        otrial = self.study.ask() if self.study is not None else None
        config, drawn = spaces.resolve(copy.deepcopy(variant), self.rng,
                                       otrial if self.optuna_search else None)
        number = None
        if otrial is not None:
            number = otrial.number
            self.live[number] = otrial
        return config, {**grid_params, **drawn}, number

    def replay(self, trials: list) -> None:
        """On resume: tell a fresh study the finished trials, so TPE goes on knowing them."""
        if not self.optuna_search:
            return
        optuna = require("optuna", "tune", "Optuna search and pruning")
        domains = {spaces.path_name(p): d for p, d in spaces.find_domains(self.variants[0][0]).items()
                   if d.kind != "sample_from"}
        for trial in trials:
            value = trial.metric(self.metric)
            if trial.status != "TERMINATED" or value is None:
                continue
            try:
                params = {k: _as_param(domains[k], trial.params[k]) for k in domains}
                dists = {k: _distribution(optuna, d) for k, d in domains.items()}
                self.study.add_trial(optuna.trial.create_trial(params=params, distributions=dists,
                                                               value=value))
            except (KeyError, ValueError):  # the space changed since: start it afresh
                continue

    def reattach(self, trial) -> None:
        """A trial resumed from the state file: a fresh Optuna trial judges it from here on."""
        if self.study is not None and trial.optuna_number not in self.live:
            otrial = self.study.ask()
            self.live[otrial.number] = otrial
            trial.optuna_number = otrial.number

    def should_prune(self, trial, value: float | None) -> bool:
        otrial = self.live.get(trial.optuna_number)
        if not self.pruning or otrial is None or value is None:
            return False
        otrial.report(value, trial.iteration)
        if self.max_t is not None and trial.iteration >= self.max_t:
            return False  # it has done its work: the others are judged against it
        return otrial.should_prune()

    def complete(self, trial, value: float | None, pruned: bool, failed: bool) -> None:
        otrial = self.live.pop(trial.optuna_number, None) if self.study is not None else None
        if otrial is None:
            return
        optuna = require("optuna", "tune", "Optuna search and pruning")
        state = optuna.trial.TrialState
        if failed or (value is None and not pruned):
            self.study.tell(otrial, state=state.FAIL)
        elif pruned:
            self.study.tell(otrial, state=state.PRUNED)
        else:
            self.study.tell(otrial, value)


def _make_study(search_alg: str, scheduler: str | None, mode: str, seed: int | None,
                grace_period: int, reduction_factor: int):
    optuna = require("optuna", "tune", "Optuna search and pruning")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if search_alg == "optuna_random":
        sampler = optuna.samplers.RandomSampler(seed=seed)
    else:
        sampler = optuna.samplers.TPESampler(seed=seed)
    if scheduler == "asha":
        pruner = optuna.pruners.SuccessiveHalvingPruner(
            min_resource=grace_period, reduction_factor=reduction_factor)
    elif scheduler == "median":
        pruner = optuna.pruners.MedianPruner(n_startup_trials=1, n_warmup_steps=grace_period)
    else:
        pruner = optuna.pruners.NopPruner()
    direction = "maximize" if mode == "max" else "minimize"
    return optuna.create_study(direction=direction, sampler=sampler, pruner=pruner)


def _distribution(optuna, domain: spaces.Domain):
    d, a = optuna.distributions, domain.args
    if domain.kind == "choice":
        return d.CategoricalDistribution(a[0] if _simple(a[0]) else list(range(len(a[0]))))
    if domain.kind == "randint":
        return d.IntDistribution(a[0], a[1] - 1)
    return d.FloatDistribution(a[0], a[1], log=domain.kind == "loguniform",
                               step=a[2] if domain.kind == "quniform" else None)


def _as_param(domain: spaces.Domain, value):
    if domain.kind == "choice" and not _simple(domain.args[0]):
        return domain.args[0].index(value)
    return value


def _simple(values) -> bool:
    return all(v is None or isinstance(v, (bool, int, float, str)) for v in values)
