"""What a sweep returns and ``rlmesh analyze`` reads: the trials of an experiment folder,
the best one by a metric (``best_config``, ``best_result``, ``best_checkpoint``), and a
plain table of trials (a list of dicts: no pandas needed)."""

from __future__ import annotations

import json
from pathlib import Path

from rlmesh.tune.trial import DONE, Trial, read_state


class ExperimentAnalysis:
    """The trials of one sweep and the best of them by ``metric`` (nested keys with "/")."""

    def __init__(self, trials: list[Trial], metric: str, mode: str = "max",
                 experiment_dir: str | Path | None = None, interrupted: bool = False):
        if mode not in ("max", "min"):
            raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
        self.trials = trials
        self.metric, self.mode = metric, mode
        self.experiment_dir = Path(experiment_dir) if experiment_dir else None
        self.interrupted = interrupted

    @classmethod
    def from_dir(cls, experiment_dir: str | Path, metric: str | None = None,
                 mode: str | None = None) -> ExperimentAnalysis:
        trials, meta = read_state(Path(experiment_dir))
        return cls(trials, metric or meta.get("metric") or "episode_reward_mean",
                   mode or meta.get("mode") or "max", experiment_dir)

    def sorted_trials(self, metric: str | None = None, mode: str | None = None) -> list[Trial]:
        """Trials best first; those without the metric last."""
        metric, mode = metric or self.metric, mode or self.mode
        sign = -1 if mode == "max" else 1
        scored = [t for t in self.trials if t.metric(metric) is not None]
        rest = [t for t in self.trials if t.metric(metric) is None]
        return sorted(scored, key=lambda t: sign * t.metric(metric)) + rest

    def get_best_trial(self, metric: str | None = None, mode: str | None = None) -> Trial | None:
        """The best trial by its last result (finished trials only, when any finished)."""
        ranked = [t for t in self.sorted_trials(metric, mode) if t.metric(metric or self.metric)
                  is not None]
        done = [t for t in ranked if t.status in DONE]
        return (done or ranked or [None])[0]

    @property
    def best_trial(self) -> Trial | None:
        return self.get_best_trial()

    @property
    def best_config(self) -> dict | None:
        best = self.best_trial
        return None if best is None else best.config

    @property
    def best_result(self) -> dict | None:
        """The best trial's last result, flat keys ("info/learner/default_policy/...")."""
        best = self.best_trial
        return None if best is None else best.last_result

    @property
    def best_checkpoint(self) -> str | None:
        best = self.best_trial
        return None if best is None else best.last_checkpoint

    @property
    def results(self) -> dict[str, dict]:
        return {t.trial_id: t.last_result for t in self.trials}

    def table(self, metric: str | None = None) -> list[dict]:
        """One row per trial, best first: id, status, iteration, metric, time, params, dir."""
        metric = metric or self.metric
        return [{"trial_id": t.trial_id, "status": t.status, "iter": t.iteration,
                 metric: t.metric(metric), "time_s": round(t.elapsed, 1), **t.params,
                 "dir": t.dir} for t in self.sorted_trials(metric)]

    def summary(self) -> str:
        """Every trial, best first, then the best trial's lines."""
        from rlmesh.tune.table import trial_rows

        return "\n".join([*trial_rows(self.sorted_trials(), self.metric), "",
                          *self.best_lines()])

    def best_lines(self) -> list[str]:
        best = self.best_trial
        if best is None:
            return [f"best trial: none ({self.metric} is in no trial's results)"]
        return [f"best trial: {best.trial_id} ({self.metric} = {best.metric(self.metric):g}, "
                f"mode {self.mode})",
                f"best config: {json.dumps(best.params or best.config, default=str)}",
                f"best checkpoint: {best.last_checkpoint}"]

    def __repr__(self) -> str:
        return (f"ExperimentAnalysis({len(self.trials)} trials, metric={self.metric!r}, "
                f"mode={self.mode!r}, dir={str(self.experiment_dir)!r})")
