"""The driver's evaluation runners (RLlib's evaluation EnvRunnerGroup): a second group of env
runner processes, apart from the training runners, acting with the evaluation config; each
evaluation hands them the newest weights, splits the duration between them and sums up the
episodes into the ``evaluation/...`` results."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from rlmesh.callbacks import summarize_custom_metrics
from rlmesh.code import startup_code
from rlmesh.envs import env_registry
from rlmesh.policy.policy import class_path
from rlmesh.results import new_stack_group
from rlmesh.runtime import ActorUnavailable, RestartPolicy

log = logging.getLogger(__name__)

EVAL_RUNNER = "rlmesh.roles.eval_runner:EvalRunner"
CALL_MARGIN_S = 30.0  # beyond evaluation_sample_timeout_s: a runner stuck inside one env step


def evaluation_runner_config(config: Any, policy_specs: dict[str, Any]) -> dict[str, Any]:
    """The evaluation runners' config as plain data: evaluation_config applied, explore off
    by default, and the render mode their envs need to show or record episodes."""
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
    out = {**cfg.to_dict(), "_env_registry": env_registry(), "_config_class": class_path(type(cfg)),
           "_policy_specs": policy_specs}
    out.update(startup_code(out))
    return out


def has_display() -> bool:
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")) or os.name == "nt"


class EvaluationGroup:
    """The evaluation runners of one algorithm (``eval_runner-<i>``; ``eval_runner-0`` in the
    driver process when evaluation_num_env_runners is 0), started on first use."""

    def __init__(self, algo: Any) -> None:
        self._algo = algo
        self.runners: list[Any] = []
        self._version = 0
        self.last_metrics: dict[str, Any] | None = None

    @property
    def config(self) -> Any:
        return self._algo.config

    async def start(self) -> None:
        if self.runners:
            return
        cfg, job = self.config, self._algo.mesh.job
        runner_config = evaluation_runner_config(cfg, self._algo.policy_specs)
        if cfg.evaluation_num_env_runners == 0:
            self.runners = [await job.spawn(EVAL_RUNNER, runner_config, 0, None,
                                            name="eval_runner-0", in_process=True)]
            return
        policy = RestartPolicy(max_restarts=cfg.max_num_env_runner_restarts
                               if cfg.restart_failed_env_runners else 0)
        self.runners = list(await asyncio.gather(*(
            job.spawn(EVAL_RUNNER, runner_config, i, None, name=f"eval_runner-{i}",
                      restart=policy, role="EvalRunner")
            for i in range(1, cfg.evaluation_num_env_runners + 1))))

    def begin(self, iteration: int) -> concurrent.futures.Future:
        """Start an evaluation on the mesh's loop with the weights of now (callbacks'
        on_evaluate_start first); ``finish`` waits for it."""
        algo = self._algo
        if algo.callbacks is not None:
            algo.callbacks.on_evaluate_start(algorithm=algo)
        record = self.config.get_evaluation_config_object().record_env
        coro = self.run(algo.get_weights(), algo.obs_filter.get_state(), iteration,
                        default_video_dir(algo) if record else None)
        return asyncio.run_coroutine_threadsafe(coro, algo._loop.loop)

    def finish(self, pending: concurrent.futures.Future) -> dict[str, Any]:
        """The metrics of an evaluation ``begin`` started (callbacks' on_evaluate_end last)."""
        metrics = pending.result()
        if self._algo.callbacks is not None:
            self._algo.callbacks.on_evaluate_end(algorithm=self._algo, evaluation_metrics=metrics)
        self.last_metrics = metrics
        return metrics

    async def run(self, weights: dict[str, Any], filter_state: Any, iteration: int,
                  video_dir: str | None) -> dict[str, Any]:
        """One evaluation: weights to every runner, the duration split among them; the
        metrics (see ``summarize``)."""
        await self.start()
        cfg = self.config
        start = time.perf_counter()
        self._version += 1
        amounts = split(cfg.evaluation_duration, len(self.runners))
        calls = [self._one(r, amount, weights, filter_state, iteration, video_dir)
                 for r, amount in zip(self.runners, amounts) if amount]
        got = [g for g in await asyncio.gather(*calls) if g is not None]
        return summarize(got, iteration, time.perf_counter() - start)

    async def _one(self, runner: Any, amount: int, weights: dict[str, Any], filter_state: Any,
                   iteration: int, video_dir: str | None) -> dict[str, Any] | None:
        from rlmesh.roles.eval_runner import video_stem

        cfg = self.config
        try:
            for pid, w in weights.items():
                await runner.call("set_weights", self._version, w, pid)
            if cfg.observation_filter != "NoFilter":
                await runner.call("set_filter_state", filter_state)
            index = int(runner.name.rsplit("-", 1)[1])
            stem = video_stem(video_dir, iteration, index) if video_dir else None
            return await runner.call("evaluate", cfg.evaluation_duration_unit, amount,
                                     cfg.evaluation_sample_timeout_s, stem,
                                     timeout=cfg.evaluation_sample_timeout_s + CALL_MARGIN_S)
        except ActorUnavailable as exc:  # restarted for the next evaluation; this one goes on
            if not cfg.restart_failed_env_runners:
                raise RuntimeError(f"evaluation runner {runner.name} failed: {exc}") from None
            log.warning("evaluation runner %s unavailable (%s); evaluating with the others",
                        runner.name, str(exc).splitlines()[0])
            return None


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
    return {**result, **new_stack_group(result)}  # RLlib's new-stack names too


def default_video_dir(algo: Any) -> str:
    """``<logdir>/videos`` (the trial folder under ``rlmesh train``), else a folder of its
    own under ~/rlmesh_results; ``record_env`` given as a path wins."""
    record = algo.config.get_evaluation_config_object().record_env
    if isinstance(record, str):
        return os.path.expanduser(record)
    if algo.logdir:
        return str(Path(algo.logdir) / "videos")
    return str(Path.home() / "rlmesh_results" / "videos" / algo.run_name)
