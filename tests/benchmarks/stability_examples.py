"""The tuned examples bench_stability measures: per example its threshold, the metric it is
read from, what it needs to reach it (docs/benchmark_log.md), and the goal for that threshold."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

GOAL = 0.9  # the bar: the minimum over seeds >= 0.9x the threshold


@dataclass(frozen=True)
class Example:
    file: str
    threshold: float  # the example's own return stop
    # What it needs to reach the threshold: the slowest seed measured (docs/benchmark_log.md,
    # section `source`), rounded up, in `unit`. None: it never reached it, nothing to hold.
    needs: int | None
    source: str
    metric: str = "episode_reward_mean"
    # timesteps_total (env steps sampled), or training_iteration for the offline algorithms,
    # which sample no env step for training.
    unit: str = "timesteps_total"
    offline: bool = False  # trains from a dataset (`input`) that the bench writes first


EXAMPLES: dict[str, Example] = {
    "ppo": Example("cartpole-ppo.yaml", 475.0, 75_000,
                   "sample_async and batches of 768: 74,496 (seed 3 of 0-9)"),
    "impala": Example("cartpole-impala.yaml", 450.0, 700_000, "Stability after convergence"),
    "appo": Example("cartpole-appo.yaml", 450.0, 600_000, "IMPALA and APPO on one machine"),
    "pg": Example("cartpole-pg.yaml", 150.0, 28_000, "PG, A2C, A3C learning: 27,923"),
    "a2c": Example("cartpole-a2c.yaml", 450.0, 190_000, "PG, A2C, A3C learning: 185,472"),
    "a3c": Example("cartpole-a3c.yaml", 150.0, 24_000, "PG, A2C, A3C learning: 23.5k"),
    "dqn": Example("cartpole-dqn.yaml", 475.0, 84_000,
                   "Replay and DQN: 83,968 (seed 2 of 0-2, the three-seed run of 2026-11-24)"),
    # The all-runner mean cannot reach 450 (one runner explores at epsilon 0.4): the
    # evaluation runner's greedy return is what holds or not.
    "apex": Example("cartpole-apex.yaml", 450.0, 29_000, "APEX: 28,200 (seed 3 of 0-4, evaluation)",
                    metric="evaluation/episode_reward_mean"),
    "ars": Example("cartpole-ars.yaml", 475.0, 62_000, "ES and ARS: 61,215"),
    "es": Example("cartpole-es.yaml", 475.0, 160_000, "ES and ARS: 159,347"),
    "pendulum-es": Example("pendulum-es.yaml", -300.0, None,
                           "ES and ARS: best -810 in its 2M budget"),
    # Pendulum: the mean of the last 10 episodes (metrics_num_episodes_for_smoothing 10).
    "ddpg": Example("pendulum-ddpg.yaml", -200.0, 7_000, "SAC, TD3, DDPG: 6,000 (seeds 0-1)"),
    "td3": Example("pendulum-td3.yaml", -200.0, 9_000, "SAC, TD3, DDPG: 8,400 (seeds 0-1)"),
    "sac": Example("pendulum-sac.yaml", -200.0, 7_000, "SAC, TD3, DDPG: 6,400 (seeds 0-1)"),
    "apex-ddpg": Example("pendulum-apex-ddpg.yaml", -200.0, 7_000, "APEX: 6,260 (seed 0)"),
    "pendulum-ppo": Example("pendulum-ppo.yaml", -250.0, 54_000,
                            "the example's comment: 53,248 (seed 0)"),
    "lunarlander-ppo": Example("lunarlander-ppo.yaml", 200.0, 550_000,
                               "PPO beyond CartPole: 540,672 (seed 1 of 0-2)"),
    # Offline: training iterations of 2000 dataset steps; evaluated after every iteration.
    "marwil": Example("cartpole-marwil.yaml", 250.0, 7, "docs/offline.md: iteration 7 (seed 0)",
                      metric="evaluation/episode_reward_mean", unit="training_iteration",
                      offline=True),
    "bc": Example("cartpole-bc.yaml", 120.0, 3, "docs/offline.md: iteration 3 (seed 0)",
                  metric="evaluation/episode_reward_mean", unit="training_iteration",
                  offline=True),
}

# `--only all` in the order of cost (cheapest first). Not in it: pendulum-es (never reaches
# its threshold).
DEFAULT_ORDER = ["pg", "ppo", "a2c", "ars", "es", "ddpg", "td3", "sac", "a3c", "marwil", "bc",
                 "apex", "dqn", "pendulum-ppo", "apex-ddpg", "appo", "impala", "lunarlander-ppo"]


def bar(threshold: float) -> float:
    """The return a seed's last-quarter mean must reach: 0.9x a positive threshold; for a
    negative one (Pendulum), within 1/0.9 of it (-200 -> -222.2): 0.9x its distance from 0
    would demand more than the threshold itself."""
    return GOAL * threshold if threshold >= 0 else threshold / GOAL


def score(worst: float, threshold: float) -> float:
    """The worst seed as a multiple of the threshold, >= GOAL when it meets the bar:
    worst/threshold for a positive threshold, threshold/worst for a negative one."""
    if threshold >= 0:
        return worst / threshold
    return threshold / worst if worst < 0 else math.inf


def metric(row: dict[str, Any], key: str) -> float:
    """``row[a][b]`` for key "a/b" (or a flat "a/b" key), NaN when the row lacks it (an
    iteration without evaluation)."""
    if key in row:
        value: Any = row[key]
    else:
        value = row
        for part in key.split("/"):
            value = value.get(part) if isinstance(value, dict) else None
    try:
        return float(value) if value is not None else math.nan
    except (TypeError, ValueError):
        return math.nan


def last_quarter_mean(rows: list[dict[str, Any]], ex: Example, budget: int) -> float:
    """Mean of the metric over the results of the last quarter of the budget."""
    tail = [metric(r, ex.metric) for r in rows if r[ex.unit] >= 0.75 * budget]
    tail = [v for v in tail if v == v]
    return sum(tail) / len(tail) if tail else math.nan


def first_reaching(rows: list[dict[str, Any]], ex: Example) -> int | None:
    """The budget counter at the first result whose metric reaches the threshold."""
    return next((r[ex.unit] for r in rows if metric(r, ex.metric) >= ex.threshold), None)


def learner_stat(row: dict[str, Any], key: str) -> float:
    stats = row.get("info", {}).get("learner", {}).get("default_policy", {})
    value = stats.get(key, math.nan)
    return float(value) if isinstance(value, (int, float)) else math.nan


def kl(row: dict[str, Any]) -> float:
    """The KL a result reports: between behaviour and trained policy (IMPALA, APPO) or of the
    update (PPO)."""
    value = learner_stat(row, "behaviour_kl")
    return value if value == value else learner_stat(row, "mean_kl_loss")


def min_entropy(rows: list[dict[str, Any]]) -> str:
    values = [v for v in (learner_stat(r, "entropy") for r in rows) if v == v]
    return f"{min(values):.3f}" if values else "-"


def curve_lines(rows: list[dict[str, Any]], ex: Example, every: int) -> list[str]:
    # The metric as last reported at each row: an evaluation metric is in every n-th row only.
    latest, known = [], math.nan
    for r in rows:
        value = metric(r, ex.metric)
        known = value if value == value else known
        latest.append(known)
    return [f"    {r[ex.unit]:>9,}  return {value:8.1f}  "
            f"entropy {learner_stat(r, 'entropy'):.3f}  kl {kl(r):.4f}  "
            f"lag {r.get('policy_lag_mean', 0):.1f}" for r, value in list(zip(rows, latest))[::every]]
