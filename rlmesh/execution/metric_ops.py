"""RLlib's ``ray.rllib.execution.metric_ops`` on rlmesh's results: ``StandardMetricsReporting``
yields each iteration's result as ``train()`` reports it (``Algorithm.iteration_result``);
PPO's ``UpdateKL`` and ``warn_about_bad_reward_scales``, which RLlib's PPO plan chains, too."""

from __future__ import annotations

import logging
import math
from typing import Any, Iterable, NoReturn

from rlmesh.algorithms.execution import plan_parts
from rlmesh.execution._refuse import refuse
from rlmesh.execution.local_iterator import LocalIterator

log = logging.getLogger(__name__)

#: RLlib's thresholds: episode rewards this many times vf_clip_param, a scaled value loss
#: this large beside a shared trunk.
REWARD_SCALE_WARNING, VF_LOSS_WARNING = 200, 100
_warned: set[str] = set()


def StandardMetricsReporting(train_op: Iterable[Any], workers: Any, config: Any) -> LocalIterator:
    """Endless: the result of each iteration (RLlib's keys: ``episode_reward_mean``,
    ``timesteps_total``, ``info/learner/<policy id>``, ...), made by the algorithm's own
    ``run_iteration`` from pulls of ``train_op``, repeated until
    ``min_time_s_per_iteration`` has passed (one pull when it is 0). The learner statistics
    are those ``TrainOneStep`` / ``AsyncGradients`` last recorded; the env steps and
    episodes those sampled meanwhile. ``train()`` returns the result as the plan hands it
    on."""
    algo, context = plan_parts(workers, "StandardMetricsReporting")
    items = iter(train_op)

    def step() -> dict[str, dict[str, Any]]:
        try:
            next(items)
        except StopIteration:
            raise _TrainOpEnded from None
        return context.step_stats()

    def results() -> Iterable[dict[str, Any]]:
        while True:
            try:
                yield algo.run_iteration(step)
            except _TrainOpEnded:
                return

    return LocalIterator(results(), "StandardMetricsReporting")


class _TrainOpEnded(Exception):
    """``train_op`` ran out: so do the results."""


class UpdateKL:
    """RLlib's PPO op that adapts each policy's KL coefficient from its update's KL.
    rlmesh's PPO learner does that itself right after each update
    (``PPOTorchPolicy.after_update``: ``adapt_kl_coeff`` from ``mean_kl_loss``, the result
    in ``cur_kl_coeff``), so adapting here again would apply it twice: this op checks that
    each trained policy reported its KL and passes the statistics on, adding RLlib's
    ``kl`` name for it."""

    def __init__(self, workers: Any) -> None:
        plan_parts(workers, "UpdateKL")
        self.policy_ids = workers.trainable_policies()

    def __call__(self, fetches: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        if not (isinstance(fetches, dict) and all(isinstance(v, dict) for v in fetches.values())):
            raise TypeError(f"UpdateKL takes the learner statistics by policy id "
                            f"(TrainOneStep's item[1]), got {type(fetches).__name__}")
        for pid in self.policy_ids:
            stats = fetches.get(pid)
            if stats is None:
                log.debug("UpdateKL: no update of %r this step, its KL coefficient stays", pid)
            elif "mean_kl_loss" not in stats and "kl" not in stats:
                raise ValueError(f"UpdateKL: policy {pid!r}'s statistics report no KL "
                                 "(mean_kl_loss); UpdateKL is PPO's, whose learner adapts "
                                 "the KL coefficient after each update; leave it out here")
            else:
                stats.setdefault("kl", stats.get("mean_kl_loss"))
        return fetches


def warn_about_bad_reward_scales(config: Any, result: dict[str, Any]) -> dict[str, Any]:
    """``result``, after a warning (once per process each) where PPO's value function will
    struggle: episode rewards more than 200x ``vf_clip_param`` (the clipped value error
    then converges slowly), or, with the value function sharing the policy's layers, a
    scaled value loss above 100 (it drowns the policy's gradient)."""
    clip = _get(config, "vf_clip_param")
    reward = result.get("episode_reward_mean")
    if clip is not None and isinstance(reward, (int, float)) and math.isfinite(reward):
        scale = abs(reward) / clip if clip > 0 else math.inf
        if scale > REWARD_SCALE_WARNING:
            _warn_once("reward_scale", "episode rewards (mean %.4g) are %.0fx vf_clip_param "
                       "(%s): the value function will take long to fit them; raise "
                       "vf_clip_param (or None) or scale the rewards down", reward, scale, clip)
    shared = (_get(config, "model") or {}).get("vf_share_layers")
    for pid, stats in result.get("info", {}).get("learner", {}).items():
        vf_loss = stats.get("vf_loss") if isinstance(stats, dict) else None
        scaled = (_get(config, "vf_loss_coeff") or 0.0) * (vf_loss or 0.0)
        if shared and scaled > VF_LOSS_WARNING:
            _warn_once("vf_loss", "policy %r: the value loss (%.4g scaled by vf_loss_coeff) "
                       "is much larger than the policy loss (%.4g) with vf_share_layers: it "
                       "can keep the policy from learning; lower vf_loss_coeff or set "
                       "vf_share_layers False", pid, scaled, stats.get("policy_loss", math.nan))
    return result


def _get(config: Any, key: str) -> Any:
    try:
        return config[key]
    except (KeyError, ValueError):  # ConfigError is a ValueError
        return None


def _warn_once(kind: str, message: str, *args: Any) -> None:
    if kind not in _warned:
        _warned.add(kind)
        log.warning(message, *args)


def __getattr__(name: str) -> NoReturn:
    refuse(name, __name__)


__all__ = ["StandardMetricsReporting", "UpdateKL", "warn_about_bad_reward_scales"]
