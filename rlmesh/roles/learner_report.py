"""What a learner's update loop reports between two ``pop_metrics`` calls: its statistics
summed per policy, env steps trained, policy lag, and the time it waited for batches."""

from __future__ import annotations

from typing import Any

import numpy as np

#: Learner statistics that count since the learner started (not per update).
COUNTS = ("num_nonfinite_updates_skipped", "num_nonfinite_batches_skipped")


class Report:
    """Learner statistics summed between two reports."""

    def __init__(self) -> None:
        self.sums: dict[str, dict[str, float]] = {}  # by policy id
        self.counts: dict[str, dict[str, int]] = {}  # by policy id: the latest COUNTS
        self.updates = 0
        self.env_steps = 0
        self.trained = 0
        self.lag_sum = 0.0
        self.lag_count = 0
        self.lag_max = 0
        self.wait_s = 0.0  # the update thread waiting for a batch
        self.busy_s = 0.0  # ... and updating

    def add(self, stats: dict[str, dict[str, float]], lag: np.ndarray, new_steps: int) -> None:
        for pid, policy_stats in stats.items():
            sums = self.sums.setdefault(pid, {})
            for k, v in policy_stats.items():
                if k in COUNTS:  # counts since the learner started: as they stand, not averaged
                    self.counts.setdefault(pid, {})[k] = int(v)
                else:
                    sums[k] = sums.get(k, 0.0) + float(v)
            self.trained += int(policy_stats.get("num_env_steps_trained", 0))
        self.updates += 1
        self.env_steps += new_steps
        self.lag_sum += float(lag.sum())
        self.lag_count += lag.size
        self.lag_max = max(self.lag_max, int(lag.max()) if lag.size else 0)

    def summary(self) -> dict[str, Any]:
        n = max(self.updates, 1)
        stats = {pid: {**{k: v / n for k, v in sums.items() if k != "num_env_steps_trained"},
                       **self.counts.get(pid, {})}
                 for pid, sums in self.sums.items()}
        return {"stats": stats, "num_updates": self.updates,
                "num_env_steps_trained": self.trained, "num_new_env_steps_trained": self.env_steps,
                "policy_lag_mean": self.lag_sum / self.lag_count if self.lag_count else 0.0,
                "policy_lag_max": self.lag_max,
                "learner_idle_fraction": (self.wait_s / (self.wait_s + self.busy_s)
                                          if self.wait_s + self.busy_s else 0.0),
                "learner_busy_s": self.busy_s}
