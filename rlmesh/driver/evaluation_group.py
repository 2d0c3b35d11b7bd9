"""The driver's evaluation runners (RLlib's evaluation EnvRunnerGroup): a second group of env
runner processes, apart from the training runners, acting with the evaluation config; each
evaluation hands them the newest weights, splits the duration between them and sums up the
episodes into the ``evaluation/...`` results."""

from __future__ import annotations

import concurrent.futures
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rlmesh.callbacks import summarize_custom_metrics
from rlmesh.config.base import AlgorithmConfig
from rlmesh.results import NEW_STACK_GROUP, new_stack_group
from rlmesh.roles.specs import RunnerSpec

if TYPE_CHECKING:
    from rlmesh.driver.run_view import RunView

log = logging.getLogger(__name__)


def evaluation_runner_spec(config: AlgorithmConfig, policy_specs: dict[str, Any]) -> RunnerSpec:
    """The evaluation runners' spec: evaluation_config applied, explore off by default, and
    the render mode their envs need to show or record episodes."""
    from rlmesh.config.settings import ConfigError
    from rlmesh.extras import MissingExtra
    from rlmesh.video import ffmpeg

    cfg = config.get_evaluation_config_object()
    if cfg.record_env:
        try:  # here, as one line, rather than in a runner at the first video
            ffmpeg("record_env")
        except MissingExtra as e:
            raise ConfigError(str(e)) from None
    if cfg.render_env or cfg.record_env:
        if cfg.render_env and not cfg.record_env and not has_display():
            raise ConfigError("render_env needs a display ($DISPLAY or $WAYLAND_DISPLAY is "
                              "not set); record_env=True writes the episodes to mp4 instead")
        mode = "rgb_array" if cfg.record_env else "human"
        cfg.env_config = {**cfg.env_config, "render_mode": cfg.env_config.get("render_mode", mode)}
    return RunnerSpec.for_run(cfg, policy_specs)


def has_display() -> bool:
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")) or os.name == "nt"


@dataclass
class PendingEvaluation:
    """An evaluation started by ``EvaluationGroup.begin``, which ``finish`` waits for."""

    iteration: int
    future: concurrent.futures.Future[tuple[list[dict[str, Any]], float]]


class EvaluationGroup:
    """The evaluation runners of one algorithm (``eval_runner-<i>``; ``eval_runner-0`` in the
    driver process when evaluation_num_env_runners is 0), started on first use; the mesh
    holds them and makes their calls."""

    def __init__(self, algo: RunView) -> None:
        self._algo = algo
        self.mesh = algo.mesh
        self._version = 0
        self.last_metrics: dict[str, Any] | None = None

    @property
    def config(self) -> AlgorithmConfig:
        return self._algo.config

    def start(self) -> None:
        if not self.mesh.handles("eval_runner"):
            self.mesh.build("evaluation", eval_runner_spec=evaluation_runner_spec(
                self.config, self._algo.policy_specs))

    def begin(self, iteration: int) -> PendingEvaluation:
        """Start an evaluation with the weights of now (callbacks' on_evaluate_start
        first): the weights go to every runner, the duration is split among them. It runs
        on while the driver goes on; ``finish`` waits for it."""
        from rlmesh.roles.eval_runner import video_stem

        algo = self._algo
        if algo.callbacks is not None:
            algo.callbacks.on_evaluate_start(algorithm=algo)
        self.start()
        record = self.config.get_evaluation_config_object().record_env
        video_dir = default_video_dir(algo) if record else None
        names = self.mesh.names("eval_runner")
        stems = [video_stem(video_dir, iteration, int(name.rsplit("-", 1)[1]))
                 if video_dir else None for name in names]
        self._version += 1
        amounts = split(self.config.evaluation_duration, len(names))
        return PendingEvaluation(iteration, self.mesh.eval_runners.evaluate(
            self._version, algo.get_weights(), algo.obs_filter.get_state(), amounts, stems,
            algo.connector_filters.get_state() if hasattr(algo, "connector_filters") else None))

    def finish(self, pending: PendingEvaluation) -> dict[str, Any]:
        """The metrics of an evaluation ``begin`` started (see ``summarize``; callbacks'
        on_evaluate_end last)."""
        got, elapsed = pending.future.result()
        metrics = summarize(got, pending.iteration, elapsed)
        if self._algo.callbacks is not None:
            self._algo.callbacks.on_evaluate_end(algorithm=self._algo, evaluation_metrics=metrics)
        self.last_metrics = metrics
        return metrics


def split(total: int, parts: int) -> list[int]:
    """``total`` in ``parts`` near-equal whole shares, the larger first."""
    base, rest = divmod(total, max(1, parts))
    return [base + (i < rest) for i in range(parts)]


def summarize(got: list[dict[str, Any]], iteration: int, elapsed: float) -> dict[str, Any]:
    """The ``evaluation/...`` metrics of the runners' replies: RLlib's episode keys over the
    episodes that ended, the partial ones apart (``num_partial_episodes``,
    ``partial_episode_reward_mean``: cut by the step cap or still running at the end)."""
    episodes = [e for g in got for e in g["episodes"]]
    partial = [e for g in got for e in g["partial_episodes"]]
    returns = np.array([e["return"] for e in episodes], dtype=float)
    lengths = np.array([e["length"] for e in episodes], dtype=float)
    nan = float("nan")
    result = {
        "episode_reward_mean": float(returns.mean()) if len(returns) else nan,
        "episode_reward_min": float(returns.min()) if len(returns) else nan,
        "episode_reward_max": float(returns.max()) if len(returns) else nan,
        "episode_len_mean": float(lengths.mean()) if len(lengths) else nan,
        "episodes_this_iter": len(episodes),
        "hist_stats": {"episode_reward": returns.tolist(), "episode_lengths": lengths.tolist()},
        "num_partial_episodes": len(partial),
        "partial_episode_reward_mean": (float(np.mean([e["return"] for e in partial]))
                                        if partial else nan),
        "num_env_steps_sampled_this_iter": sum(int(g["env_steps"]) for g in got),
        "timed_out": any(g["timed_out"] for g in got),
        "custom_metrics": summarize_custom_metrics([e.get("custom_metrics", {}) for e in episodes]),
        "videos": [v for g in got for v in g["videos"]],
        "num_healthy_env_runners": len(got),
        "training_iteration": iteration,
        "time_s": elapsed,
    }
    result.update(new_stack_group(result))  # RLlib's new-stack names too
    states = [g["runner_metrics"] for g in got if g.get("runner_metrics")]
    if states:  # the callbacks' metrics_logger values of this evaluation
        from rlmesh.utils.metrics.metrics_logger import MetricsLogger

        logger = MetricsLogger()
        logger.merge_and_log_n_dicts(states)
        result.setdefault(NEW_STACK_GROUP, {}).update(logger.reduce())
    return result


def default_video_dir(algo: RunView) -> str:
    """``<logdir>/videos`` (the trial folder under ``rlmesh train``), else a folder of its
    own under ~/rlmesh_results; ``record_env`` given as a path wins."""
    record = algo.config.get_evaluation_config_object().record_env
    if isinstance(record, str):
        return os.path.expanduser(record)
    if algo.logdir:
        return str(Path(algo.logdir) / "videos")
    return str(Path.home() / "rlmesh_results" / "videos" / algo.run_name)
