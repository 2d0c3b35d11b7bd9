"""The evaluation group (RLlib's ``.evaluation()``): evaluation runners, how often and how long
they run, and the config overrides they act with.
Mixed into AlgorithmConfig; each setting is declared here once, as in base.py."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal, get_type_hints

from rlmesh.config.settings import setting


@dataclass(kw_only=True)
class EvaluationSettings:
    evaluation_interval: int | None = setting(
        None, "evaluation", ge=1,
        doc="Evaluate every this many training iterations (results under 'evaluation/...'); "
            "None: never, unless algo.evaluate() is called.")
    evaluation_duration: int = setting(
        10, "evaluation", gt=0, aliases=("evaluation_num_episodes",),
        doc="How long one evaluation runs, in evaluation_duration_unit, over all evaluation "
            "runners (split evenly between them).")
    evaluation_duration_unit: Literal["episodes", "timesteps"] = setting(
        "episodes", "evaluation",
        doc="'episodes': evaluation_duration complete episodes; 'timesteps': that many env "
            "steps (episodes still running at the end are reported as partial).")
    evaluation_num_env_runners: int = setting(
        0, "evaluation", ge=0, aliases=("evaluation_num_workers",),
        doc="Evaluation runner processes, apart from the training runners; 0 evaluates in "
            "the driver process.")
    evaluation_config: dict = setting(
        {}, "evaluation", merge=True,
        doc="Config overrides for the evaluation runners only (any config key, e.g. "
            "{'explore': True, 'env_config': {...}, 'record_env': True}). Evaluation acts "
            "without exploration (explore False) unless this sets it.")
    evaluation_parallel_to_training: bool = setting(
        False, "evaluation",
        doc="Run the evaluation while the iteration trains (on the evaluation runners' own "
            "cores), instead of after it.")
    evaluation_sample_timeout_s: float = setting(
        120.0, "evaluation", gt=0,
        doc="Seconds one evaluation may take; past it the episodes still running are "
            "reported as partial (evaluation/num_partial_episodes) and the rest is dropped, "
            "so an env that never ends cannot hang training.")
    evaluation_max_steps_per_episode: int = setting(
        10_000, "evaluation", ge=1,
        doc="Step cap of one evaluation episode: an episode this long is cut and reported "
            "as partial (an env with no time limit would otherwise evaluate for ever).")
    render_env: bool = setting(
        False, "evaluation",
        doc="Show the evaluation runners' envs in a window (gymnasium render_mode 'human'; "
            "a factory env gets render_mode in its env_config). Needs a display; "
            "record_env writes mp4 files instead.")
    record_env: bool | str = setting(
        False, "evaluation",
        doc="Record evaluation episodes to mp4 (gymnasium 'rgb_array' frames, imageio-ffmpeg: "
            "pip install 'rlmesh[video]'): the first episode of env 0 of each evaluation "
            "runner per evaluation, into the trial's videos/ folder, or into this folder "
            "when a path is given.")
    evaluation_video_to_tensorboard: bool = setting(
        False, "evaluation",
        doc="Also log each recorded evaluation episode's frames to TensorBoard "
            "('evaluation/video', up to 16 frames as images; rlmesh train).")

    def evaluation(self, **kwargs):
        """Set the evaluation group (see ``fields_table("evaluation")``)."""
        return self._set("evaluation", kwargs)

    def _evaluation_checks(self) -> list[str]:
        """Cross checks of the group: the overrides must be config keys of this class."""
        from rlmesh.config.settings import ConfigError

        problems = []
        for key in self.evaluation_config:
            try:
                self._resolve(key)
            except ConfigError as e:
                problems.append(f"evaluation_config: {e}")
        if not problems:  # the overrides' values, checked as the fields they set
            cfg = self.get_evaluation_config_object()
            hints = get_type_hints(type(cfg))
            problems += [f"evaluation_config: {p}" for f in dataclasses.fields(cfg)
                         if (p := cfg._check_field(f, hints))]
        if self.evaluation_interval and self.env is None:
            problems.append("evaluation_interval: evaluation steps envs of its own, and this "
                            "run has none (policy_server_address); set .environment(env=...) "
                            "or leave evaluation off")
        if self.evaluation_parallel_to_training and self.evaluation_num_env_runners == 0:
            problems.append("evaluation_parallel_to_training: needs evaluation runner processes "
                            "(evaluation_num_env_runners >= 1); with 0 the evaluation would "
                            "sample in the driver's event loop, stalling training")
        return problems

    def get_evaluation_config_object(self):
        """A copy of this config with evaluation_config applied and explore off (unless
        the overrides turn it on): what the evaluation runners act with."""
        cfg = self.copy()
        overrides = {"explore": False, **self.evaluation_config}
        cfg.update_from_dict(overrides)
        return cfg
