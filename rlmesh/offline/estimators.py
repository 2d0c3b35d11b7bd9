"""Off-policy estimation on logged episodes: how much return the policy being trained would
get, from episodes another policy (the behaviour policy) acted in. Importance sampling
(IS) and weighted IS (WIS), per decision (Precup et al. 2000), with RLlib's result names."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlmesh.config.offline import estimator_kind
from rlmesh.offline.records import ACTION_PROB
from rlmesh.rl.columns import Columns


def behaviour_logp(episode: dict[str, np.ndarray]) -> np.ndarray:
    if Columns.ACTION_LOGP in episode:
        return np.asarray(episode[Columns.ACTION_LOGP], np.float64)
    if ACTION_PROB in episode:
        return np.log(np.asarray(episode[ACTION_PROB], np.float64))
    raise KeyError("the data has neither action_logp nor action_prob: off-policy estimation "
                   "needs the behaviour policy's probability of each logged action")


def cumulative_ratios(policy: Any, episode: dict[str, np.ndarray]) -> np.ndarray:
    """p_t = prod_{i<=t} pi(a_i|s_i) / mu(a_i|s_i) along one episode."""
    target = policy.score_actions(episode[Columns.OBS], episode[Columns.ACTIONS])
    log_ratio = np.asarray(target[Columns.ACTION_LOGP], np.float64) - behaviour_logp(episode)
    return np.exp(np.cumsum(np.clip(log_ratio, -50, 50)))


def importance_sampling(rewards: list[np.ndarray], ratios: list[np.ndarray], gamma: float,
                        weighted: bool) -> dict[str, float]:
    """v_behavior (the logged discounted return), v_target (its IS or WIS estimate under
    the target policy) and v_gain = v_target / v_behavior, means over the episodes. WIS
    divides each step's ratio by the mean ratio of all episodes at that step."""
    longest = max(len(r) for r in rewards)
    norm = np.ones(longest)
    if weighted:
        sums, counts = np.zeros(longest), np.zeros(longest)
        for p in ratios:
            sums[:len(p)] += p
            counts[:len(p)] += 1
        norm = sums / np.maximum(counts, 1)
    v_b, v_t = [], []
    for r, p in zip(rewards, ratios):
        disc = gamma ** np.arange(len(r))
        v_b.append(float(np.sum(disc * r)))
        v_t.append(float(np.sum(disc * r * p / np.maximum(norm[:len(p)], 1e-300))))
    behavior, target = float(np.mean(v_b)), float(np.mean(v_t))
    return {"v_behavior": behavior, "v_target": target,
            "v_gain": target / behavior if behavior else float("nan"),
            "v_target_std": float(np.std(v_t))}


def estimate(methods: list | dict, policy: Any, episodes: list[dict[str, np.ndarray]],
             gamma: float) -> dict[str, dict[str, float]]:
    """``{name: {v_behavior, v_target, v_gain, v_target_std}}`` for each configured method
    ('is', 'wis', or RLlib's dict {name: {'type': ...}})."""
    named = ({n: (m.get("type", n) if isinstance(m, dict) else n) for n, m in methods.items()}
             if isinstance(methods, dict) else {m: m for m in methods})
    rewards = [np.asarray(e[Columns.REWARDS], np.float64) for e in episodes]
    ratios = [cumulative_ratios(policy, e) for e in episodes]
    return {name: importance_sampling(rewards, ratios, gamma, estimator_kind(kind) == "wis")
            for name, kind in named.items()}
