"""The evaluation runner: an EnvRunner that, asked to ``evaluate``, runs fresh episodes with
the weights and observation filter statistics it was handed (explore off unless
evaluation_config says otherwise; the filter not updated by its steps), caps each
episode's steps and the evaluation's time, and records the first episode to mp4 when asked."""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Any

import gymnasium as gym

from rlmesh.rl.filters import NoFilter
from rlmesh.roles.env_runner import EnvRunner

log = logging.getLogger(__name__)

CHUNK_STEPS = 64  # steps per env between checks of the targets and the time budget


class FrozenFilter:
    """An observation filter applied with the statistics it was handed (set_state) and
    never updated: an evaluation acts with the driver's filter of its iteration. (Updated,
    an evaluation runner's own steps, never merged by the driver, piled up on top of the
    driver's statistics evaluation after evaluation.)"""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __call__(self, obs: Any, update: bool = True) -> Any:
        return self.inner(obs, update=False)

    def __getattr__(self, name: str) -> Any:  # get_state, set_state, flush, ...
        return getattr(self.inner, name)


class EvalRunner(EnvRunner):
    """``spec``: a ``RunnerSpec`` of the evaluation config (overrides applied, see
    ``AlgorithmConfig.get_evaluation_config_object``); weights come by ``set_weights``."""

    protocol = EnvRunner.protocol.extend(calls=("evaluate",))

    in_evaluation = True

    def __init__(self, spec: dict[str, Any]) -> None:
        self._recorder: Any = None
        self._caps: list[Any] = []
        super().__init__(spec)
        if type(self.sampler.obs_filter) is not NoFilter:
            self.sampler.obs_filter = FrozenFilter(self.sampler.obs_filter)

    def wrap_env(self, env: gym.Env, index: int) -> gym.Env:
        from rlmesh.video import FrameRecorder, StepCap

        env = StepCap(env, self.config.evaluation_max_steps_per_episode)
        self._caps.append(env)
        if index == 0 and self.config.record_env:
            env = self._recorder = FrameRecorder(env)
        return env

    def evaluate(self, unit: str, amount: int, timeout_s: float,
                 video_stem: str | None = None) -> dict[str, Any]:
        """Fresh episodes until ``amount`` episodes ended (unit "episodes") or ``amount`` env
        steps were taken ("timesteps"), or ``timeout_s`` passed. Returns the ended episodes'
        summaries, the partial ones (cut by the step cap, or still running at the end of a
        "timesteps" evaluation or of the time budget), the env steps and the videos written."""
        deadline = time.monotonic() + timeout_s
        cut_before = sum(c.num_cut for c in self._caps)
        if self._recorder is not None and video_stem:
            self._recorder.arm(video_stem)
        self.sampler.restart_episodes()
        episodes: list[dict[str, Any]] = []
        steps, timed_out = 0, False
        n = len(self.sampler.slots)
        while True:
            left = amount - (len(episodes) if unit == "episodes" else steps)
            if left <= 0:
                break
            if time.monotonic() > deadline:
                timed_out = True
                break
            rows = CHUNK_STEPS if unit == "episodes" else min(CHUNK_STEPS, math.ceil(left / n))
            fragment = self.sampler.sample(rows, False, self.config.explore)
            steps += fragment["env_steps"]
            episodes.extend(fragment["episodes"])
        if unit == "episodes":
            episodes = episodes[:amount]
        running = [] if unit == "episodes" and not timed_out else [
            s.episode.summary() for s in self.sampler.slots if s.episode and s.episode.length]
        cut = sum(c.num_cut for c in self._caps) - cut_before
        # Episodes the step cap ended are in ``episodes`` as ended: move them to partial.
        capped = [e for e in episodes if e["length"] >= self.config.evaluation_max_steps_per_episode][:cut]
        finished = [e for e in episodes if not any(e is c for c in capped)]
        videos: list[str] = []
        if self._recorder is not None:
            self._recorder.flush()
            videos, self._recorder.written = self._recorder.written, []
        log.debug("evaluated: %d episodes, %d partial, %d env steps%s", len(finished),
                  len(capped) + len(running), steps, " (out of time)" if timed_out else "")
        return {"episodes": finished, "partial_episodes": capped + running, "env_steps": steps,
                "timed_out": timed_out, "videos": videos, "worker_index": self.worker_index,
                # what the callbacks' metrics_logger took (evaluation/env_runners/...)
                "runner_metrics": self.metrics.pending_state()}


def video_stem(video_dir: str | Path, iteration: int, worker_index: int) -> str:
    """Where evaluation runner ``worker_index`` records at ``iteration`` (no suffix)."""
    return str(Path(video_dir) / f"evaluation_iter{iteration:06d}_runner{worker_index}")
