"""The result of one training iteration in RLlib's keys: episode statistics over the smoothing
window, the run's counters, the learners' statistics by policy id, and what a result warns of
(a policy whose entropy collapsed). ``Algorithm`` keeps the counters; this assembles them."""

from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from rlmesh.driver import policies
from rlmesh.callbacks import summarize_custom_metrics, summarize_hist_data
from rlmesh.env.registry import space_from_data
from rlmesh.results import NEW_STACK_GROUP, new_stack_group

if TYPE_CHECKING:
    from rlmesh.driver.run_view import RunView

log = logging.getLogger(__name__)

# A discrete policy whose entropy is below this fraction of log(n) is warned about.
ENTROPY_COLLAPSE = 0.02


def iteration_result(algo: RunView, fragments: list[dict[str, Any]], steps: int,
                     stats: dict[str, float], elapsed: float, sample_time: float,
                     learn_time: float) -> dict[str, Any]:
    """``algo``'s result for an iteration that sampled ``fragments`` (``steps`` env steps)
    and trained with learner ``stats`` by policy id; adds the new episodes to its window."""
    new = [e for f in fragments for e in f["episodes"]]
    algo.episode_window.extend(new)
    # A vector env's fragments list their last episodes only (VectorEnvSampler.episodes_listed).
    ended = len(new) + sum(int(f.get("num_episodes_unlisted", 0)) for f in fragments)
    algo.episodes_total += ended
    returns = [e["return"] for e in algo.episode_window]
    lengths = [e["length"] for e in algo.episode_window]
    nan = float("nan")
    warn_entropy_collapse(algo, stats)
    algo.num_nonfinite_steps_skipped += sum(int(f.get("num_nonfinite_steps_skipped", 0))
                                            for f in fragments)
    learner_info = {pid: stats.get(pid, {}) for pid in algo.policy_specs}
    result = {
        "episode_reward_mean": float(np.mean(returns)) if returns else nan,
        "episode_reward_min": float(np.min(returns)) if returns else nan,
        "episode_reward_max": float(np.max(returns)) if returns else nan,
        "episode_len_mean": float(np.mean(lengths)) if lengths else nan,
        "episodes_this_iter": ended,
        "episodes_total": algo.episodes_total,
        "timesteps_total": algo.timesteps_total,
        "num_env_steps_sampled": algo.timesteps_total,
        "num_env_steps_trained": algo.num_env_steps_trained,
        "num_env_steps_sampled_this_iter": steps,
        "idle_iteration": steps == 0,
        "num_env_steps_sampled_throughput_per_sec": steps / sample_time if sample_time else nan,
        "time_this_iter_s": elapsed,
        "time_total_s": algo.time_total_s,
        "timers": {"sample_time_s": sample_time, "learn_time_s": learn_time},
        "training_iteration": algo.iteration,
        "num_healthy_env_runners": algo.mesh.runners.num_healthy(),
        "num_env_runner_restarts": algo.mesh.runners.restarts,
        # Sampling rounds runners missed (being restarted) that the others made up for.
        "num_fragments_missed_this_iter": algo.mesh.runners.pop_fragments_missed(),
        "num_env_errors": algo.mesh.totals["num_env_errors"],
        # What the driver sent this iteration: calls, heartbeat pings, polls of node agents
        # (what must not grow with the runners: docs/scale.md).
        "driver_messages": algo.mesh.messages_this_iteration(),
        "custom_metrics": summarize_custom_metrics([e.get("custom_metrics", {}) for e in new]),
        "hist_stats": summarize_hist_data(algo.episode_window),  # RLlib's, over the window
        "num_nonfinite_steps_skipped": algo.num_nonfinite_steps_skipped,
        **_nonfinite_learner_counts(algo, learner_info),
        "info": {"learner": learner_info, "inference": dict(algo.mesh.inference)},
        **_policy_lag(fragments),
        **_multi_agent_results(algo, new, fragments),
        **client_rejections(fragments),
        **_episodes_by_client(new),
    }
    # RLlib's new-stack names of the same values (results.py says why both)
    result["num_env_steps_sampled_lifetime"] = algo.timesteps_total
    result.update(new_stack_group(result))
    learners = learner_group(learner_info)
    if learners:  # RLlib's result["learners"][module_id][key]
        result["learners"] = learners
    logged = runner_metrics(algo, fragments)
    if logged:  # the callbacks' metrics_logger values, beside the episode statistics
        result.setdefault(NEW_STACK_GROUP, {}).update(logged)
    return result


def learner_group(learner_info: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """RLlib's ``learners`` group: each policy's statistics (its update's, and what a
    Learner hook logged for it in ``self.metrics``) by module id, and under
    ``__all_modules__`` the values logged for no one module. The per-module values are
    info/learner's (TensorBoard plots them once: results.is_new_stack_duplicate)."""
    prefix = "__all_modules__/"
    group: dict[str, dict[str, Any]] = {}
    for pid, stats in learner_info.items():
        if not stats:
            continue
        group[pid] = {k: v for k, v in stats.items() if not k.startswith(prefix)}
        for key, value in stats.items():
            if key.startswith(prefix):
                group.setdefault(prefix[:-1], {})[key[len(prefix):]] = value
    return group


def runner_metrics(algo: Any, fragments: list[dict[str, Any]]) -> dict[str, Any]:
    """The env runners' MetricsLogger values that came with ``fragments``, merged into the
    driver's logger of them (``algo.env_runner_metrics``, made when first needed) and
    reduced: {} while none was ever logged, at no cost."""
    states = [f["runner_metrics"] for f in fragments if f.get("runner_metrics")]
    logger = getattr(algo, "env_runner_metrics", None)
    if logger is None:
        if not states:
            return {}
        from rlmesh.utils.metrics.metrics_logger import MetricsLogger

        logger = algo.env_runner_metrics = MetricsLogger()
    logger.merge_and_log_n_dicts(states)
    return logger.reduce()


def _policy_lag(fragments: list[dict[str, Any]]) -> dict[str, float]:
    """How many updates behind the learner the weights that sampled this iteration's
    fragments were (``EnvRunnerGroup.record``), as IMPALA and APPO report it."""
    lags = [f["policy_lag"] for f in fragments if "policy_lag" in f]
    if not lags:
        return {}
    return {"policy_lag_mean": float(np.mean(lags)), "policy_lag_max": int(max(lags))}


def _multi_agent_results(algo: RunView, new: list[dict[str, Any]],
                         fragments: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-policy rewards and agent steps (multi-agent runs only)."""
    if not any("agent_steps" in f for f in fragments) and not algo.config.is_multi_agent:
        return {}
    out = policies.policy_results(list(algo.episode_window), new, fragments)
    algo.num_agent_steps_sampled += out["num_agent_steps_sampled_this_iter"]
    return {**out, "num_agent_steps_sampled": algo.num_agent_steps_sampled}


def warn_entropy_collapse(algo: RunView, stats: dict[str, Any]) -> None:
    """Warn once per policy whose discrete action distribution has become nearly
    deterministic: with no exploration left a policy that is wrong stays wrong (IMPALA's
    CartPole collapses to one action, entropy 0.000, return 9, and never recovers)."""
    for pid, policy_stats in stats.items():
        spec = algo.policy_specs.get(pid)
        if pid in algo.entropy_warned or spec is None or "entropy" not in policy_stats:
            continue
        space = space_from_data(spec["action_space"])
        if not isinstance(space, gym.spaces.Discrete):
            continue
        entropy, most = policy_stats.get("entropy"), float(np.log(space.n))
        if entropy is not None and most > 0 and entropy < ENTROPY_COLLAPSE * most:
            algo.entropy_warned.add(pid)
            log.warning("policy %r: entropy fell to %.4f (at most %.3f for %d actions) at "
                        "%s env steps: it has nearly stopped exploring and may not recover; "
                        "raise entropy_coeff (e.g. 0.01) or lower lr", pid, entropy, most,
                        space.n, f"{algo.timesteps_total:,}")


def _nonfinite_learner_counts(algo: RunView, learner_info: dict[str, dict[str, Any]]) -> dict[str, int]:
    """The learners' counts of batches and updates skipped for NaN/inf, over all policies
    (kept from earlier iterations when this one has no statistics of a policy)."""
    counts = algo.nonfinite_counts
    for key in ("num_nonfinite_batches_skipped", "num_nonfinite_updates_skipped"):
        now = sum(int(info.get(key, 0)) for info in learner_info.values())
        counts[key] = max(counts.get(key, 0), now)
    return dict(counts)


def _episodes_by_client(new: list[dict[str, Any]]) -> dict[str, Any]:
    """``{"episodes_by_client": {client: n}}``: this iteration's episodes by the policy
    server client that played them (each client holds at most its share: policy_quotas)."""
    counts = Counter(e["client"] for e in new if "client" in e)
    return {"episodes_by_client": dict(counts)} if counts else {}


def client_rejections(fragments: list[dict[str, Any]]) -> dict[str, Any]:
    """``{"client_rejections": {client: {field: n}}}``: the calls policy servers refused,
    so far, by client and field (each server's newest count); {} without policy servers."""
    newest = {f["worker_index"]: f["client_rejections"] for f in fragments
              if "client_rejections" in f}
    if not newest:
        return {}
    total: dict[str, dict[str, int]] = {}
    for counts in newest.values():
        for client, fields in counts.items():
            mine = total.setdefault(client, {})
            for field, n in fields.items():
                mine[field] = mine.get(field, 0) + n
    return {"client_rejections": total}
