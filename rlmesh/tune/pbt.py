"""Population based training on checkpoints: every ``perturbation_interval`` iterations a
trial in the bottom quantile stops, takes a copy of a top trial's newest checkpoint
(exploit) and goes on from it with that trial's hyperparameters perturbed (explore)."""

from __future__ import annotations

import copy
import math
import random

from rlmesh.tune import spaces


class PopulationBasedTraining:
    """PBT as Ray Tune's scheduler of the same name (the sweep does the copying)."""

    def __init__(self, metric: str | None = None, mode: str = "max",
                 perturbation_interval: int = 4, hyperparam_mutations: dict | None = None,
                 quantile_fraction: float = 0.25, resample_probability: float = 0.25,
                 perturbation_factors: tuple[float, float] = (1.2, 0.8), seed: int | None = None):
        if not hyperparam_mutations:
            raise ValueError("PopulationBasedTraining needs hyperparam_mutations: "
                             "{key: list of values or a search space} to explore")
        if not 0 < quantile_fraction <= 0.5:
            raise ValueError(f"quantile_fraction must be in (0, 0.5], got {quantile_fraction}")
        self.metric, self.mode = metric, mode
        self.interval = int(perturbation_interval)
        self.mutations = hyperparam_mutations
        self.quantile = quantile_fraction
        self.resample_probability = resample_probability
        self.factors = perturbation_factors
        self.rng = random.Random(seed)

    def decide(self, trial, trials: list) -> dict:
        """{} to go on; {"save": True} at a perturbation point; or {"exploit": donor id,
        "config": the perturbed config} for a trial in the bottom quantile."""
        if trial.iteration == 0 or trial.iteration % self.interval:
            return {}
        scored = [t for t in trials if t.metric(self.metric) is not None]
        if len(scored) < 2:
            return {"save": True}
        sign = 1 if self.mode == "max" else -1
        scored.sort(key=lambda t: sign * t.metric(self.metric))  # worst first
        n = max(1, math.floor(len(scored) * self.quantile))
        bottom, top = scored[:n], [t for t in scored[-n:] if t.last_checkpoint]
        if trial not in bottom or not top or trial in top:
            return {"save": True}
        donor = self.rng.choice(top)
        return {"exploit": donor.trial_id, "config": self.explore(donor.config)}

    def explore(self, config: dict) -> dict:
        """``config`` with each mutated key resampled or scaled by a factor."""
        new = copy.deepcopy(config)
        for key, space in self.mutations.items():
            path = tuple(key.split("/"))
            node = new
            for part in path[:-1]:
                node = node.setdefault(part, {})
            old = node.get(path[-1])
            node[path[-1]] = self._mutate(old, space, key)
        return new

    def _mutate(self, old, space, key: str):
        domain = spaces.as_domain(space, key)
        values = list(space) if isinstance(space, (list, tuple)) else None
        numeric = isinstance(old, (int, float)) and not isinstance(old, bool)
        if self.rng.random() < self.resample_probability or not numeric:
            if values is not None:
                return copy.deepcopy(self.rng.choice(values))
            if domain is not None:
                return domain.sample(self.rng)
            return old
        if values is not None and old in values:  # move to a neighbouring value
            i = values.index(old) + self.rng.choice((-1, 1))
            return values[min(max(i, 0), len(values) - 1)]
        scaled = old * self.rng.choice(self.factors)
        return int(round(scaled)) if isinstance(old, int) else scaled
