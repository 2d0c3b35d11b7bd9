"""Where a training run's results go and in what form: RLlib/Tune's trial directory with
params.json, result.json, progress.csv and a TensorBoard event file, so tools that read
Ray results (pandas, TensorBoard, ExperimentAnalysis-style scripts) read rlmesh's too.

Layout::

    <local_dir>/<experiment>/<trial>/        local_dir: ~/rlmesh_results by default
        params.json                          the full config, once (sorted keys, indented)
        result.json                          one JSON object per line per iteration
        progress.csv                         the same results, flattened ("info/learner/...")
        events.out.tfevents.<time>.<host>    TensorBoard scalars "ray/tune/<flat key>"
        checkpoint_000010/                   written by `rlmesh train` through algo.save()

Names: experiment ``<run>_<env>_<YYYY-MM-DD_HH-MM-SS>`` unless given (the top-level key of
an RLlib-style tuned-example file gives it); trial ``<run>_<env>_<id>_00000_0_<date>`` as
Tune names its first trial, ``<id>`` five random hex digits so two runs never collide.

Values that JSON cannot hold: NaN and +-inf (a mean over no episodes yet) are written as
``null`` in result.json and params.json, so both stay strict JSON any parser reads; in
progress.csv as ``nan``/``inf``/``-inf`` (pandas reads those as floats); in TensorBoard they
are left out, as RLlib leaves out NaN. numpy scalars become numbers, arrays lists; any other
object its ``str()``.
"""

from __future__ import annotations

import csv
import datetime as _dt
import json
import logging
import math
import os
import queue
import re
import secrets
import threading
import time
from pathlib import Path
from typing import Any

from rlmesh.result_rows import drop_rows_after

DEFAULT_LOCAL_DIR = "~/rlmesh_results"
DATE_FORMAT = "%Y-%m-%d_%H-%M-%S"  # Tune's
TB_PREFIX = "ray/tune/"  # RLlib's tag prefix, so dashboards built for RLlib runs carry over
TB_FLUSH_SECS = 5  # how stale a live TensorBoard view may be
TB_VIDEO_FRAMES = 16  # frames of each evaluation video shown in TensorBoard
# Not curves worth plotting (RLlib's TBX logger drops these too).
_TB_SKIP = frozenset({"config", "pid", "timestamp"})


# --- names and directories ---

def safe_name(text: str) -> str:
    """``text`` usable as one path component: 'pkg.envs:make_env' -> 'pkg.envs_make_env'."""
    return re.sub(r"[^A-Za-z0-9._=+-]+", "_", str(text)).strip("_.") or "_"


def date_str(now: _dt.datetime | None = None) -> str:
    return (now or _dt.datetime.now()).strftime(DATE_FORMAT)


def default_experiment_name(run: str, env: Any, now: _dt.datetime | None = None) -> str:
    return f"{safe_name(run)}_{safe_name(env)}_{date_str(now)}"


def make_trial_dir(local_dir: str | os.PathLike | None, experiment: str, run: str,
                   env: Any) -> tuple[Path, str]:
    """Create a new ``<local_dir>/<experiment>/<trial>/`` and return it with the trial id."""
    root = Path(os.path.expanduser(str(local_dir or DEFAULT_LOCAL_DIR))) / safe_name(experiment)
    root.mkdir(parents=True, exist_ok=True)
    while True:
        trial_id = f"{secrets.token_hex(3)[:5]}_00000"
        path = root / f"{safe_name(run)}_{safe_name(env)}_{trial_id}_0_{date_str()}"
        try:
            path.mkdir()
            return path, trial_id
        except FileExistsError:  # same second and same five hex digits: draw again
            continue


# --- values ---

def to_jsonable(value: Any) -> Any:
    """``value`` as strict-JSON data: numpy to Python, non-finite floats to None."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in value]
    if hasattr(value, "tolist") and hasattr(value, "dtype"):  # numpy scalar or array
        return to_jsonable(value.tolist())
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return str(value)


def flatten(d: dict, prefix: str = "", sep: str = "/") -> dict[str, Any]:
    """Nested dicts to one level, keys joined by ``sep`` as RLlib's ``flatten_dict``;
    empty dicts vanish (there is nothing to put in a column)."""
    out: dict[str, Any] = {}
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + sep, sep))
        else:
            out[name] = value
    return out


# --- RLlib's names of the same values ---
# RLlib's two API stacks name a result's values differently. rlmesh's own keys are the old
# stack's top-level ones (episode_reward_mean, timesteps_total); a result also carries the new
# stack's ``env_runners`` group (NEW_STACK_GROUP), real keys because scripts index
# ``result["env_runners"]["episode_return_mean"]``. The old stack's other spellings
# (sampler_results/..., info/num_env_steps_sampled, ..._lifetime) are resolved when a stop
# key, a sweep's metric or an analysis looks a value up, not written a third time.
NEW_STACK_GROUP = "env_runners"
# The new stack's names, under env_runners/ or at the top, of values rlmesh names otherwise.
RENAMED = {
    "episode_return_mean": "episode_reward_mean",
    "episode_return_min": "episode_reward_min",
    "episode_return_max": "episode_reward_max",
    "num_episodes": "episodes_this_iter",
    "num_episodes_lifetime": "episodes_total",
    "num_env_steps_sampled_lifetime": "timesteps_total",
    "num_env_steps_trained_lifetime": "num_env_steps_trained",
    "num_agent_steps_sampled_lifetime": "num_agent_steps_sampled",
    "num_agent_steps_trained_lifetime": "num_agent_steps_trained",
}
_GROUPS = ("sampler_results/", NEW_STACK_GROUP + "/")


def result_key(key: str) -> str:
    """rlmesh's key of the result value that RLlib (either stack) names ``key``:
    "env_runners/episode_return_mean" and "sampler_results/episode_reward_mean" are
    "episode_reward_mean", "info/num_env_steps_sampled" is "num_env_steps_sampled",
    "num_env_steps_sampled_lifetime" is "timesteps_total"; "evaluation/" keeps its prefix."""
    prefix = "evaluation/" if key.startswith("evaluation/") else ""
    rest = key[len(prefix):]
    for group in _GROUPS:
        if rest.startswith(group):
            rest = rest[len(group):]
            break
    else:  # the old stack's counters under info/ (not info/learner/...)
        if rest.startswith("info/") and "/" not in rest[5:] and rest[5:].startswith("num_"):
            rest = rest[5:]
    return prefix + RENAMED.get(rest, rest)


def lookup(flat: dict, key: str) -> Any:
    """The value of ``key`` in a flat result (keys joined by "/"), by its own name or, when
    absent, by rlmesh's name of it (``result_key``); None when neither is there."""
    if key in flat:
        return flat[key]
    return flat.get(result_key(key))


# The env_runners group a result carries: the new stack's name -> rlmesh's key.
_NEW_STACK_GROUP_KEYS = ("episode_return_mean", "episode_return_min", "episode_return_max",
                         "episode_len_mean", "num_episodes", "num_episodes_lifetime",
                         "num_env_steps_sampled_lifetime")


def new_stack_group(result: dict) -> dict[str, Any]:
    """``{"env_runners": {...}}``: the episode statistics and counters of ``result`` (an
    iteration's, or an evaluation's) under the names of RLlib's new API stack."""
    group = {name: result[RENAMED.get(name, name)] for name in _NEW_STACK_GROUP_KEYS
             if RENAMED.get(name, name) in result}
    return {NEW_STACK_GROUP: group} if group else {}


def is_new_stack_duplicate(flat_key: str) -> bool:
    """A flat key of the env_runners or learners group (or its evaluation/ twin), whose
    values the result holds under rlmesh's own keys too: TensorBoard plots each value once."""
    rest = flat_key.removeprefix("evaluation/")
    # The group's other keys (a callback's metrics_logger values) are its own: plotted.
    # learners/<module id>/... are info/learner/<policy id>/...; learners/__all_modules__/
    # is the learners' own.
    return (rest.startswith(NEW_STACK_GROUP + "/")
            and rest[len(NEW_STACK_GROUP) + 1:] in _NEW_STACK_GROUP_KEYS
            or rest == "num_env_steps_sampled_lifetime"
            or rest.startswith("learners/") and not rest.startswith("learners/__all_modules__/"))


def as_number(value: Any) -> float | None:
    """``value`` as a float when it is a numeric scalar (bools and numpy included), else None."""
    if isinstance(value, (int, float)):
        return float(value)
    if hasattr(value, "dtype") and getattr(value, "shape", None) == ():
        try:
            return float(value)
        except (TypeError, ValueError):
            return None
    return None


def _csv_cell(value: Any) -> Any:
    if hasattr(value, "dtype") and getattr(value, "shape", None) == ():
        value = value.item()  # numpy scalar -> int, float or bool
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)  # 'nan', 'inf', '-inf' for the non-finite
    if isinstance(value, (str, int)):
        return value
    return json.dumps(to_jsonable(value), allow_nan=False)  # lists and arrays as JSON text


# --- the logger ---

class ResultLogger:
    """Writes each iteration's result to ``trial_dir`` in Tune's formats.

    progress.csv's columns are the keys seen so far, in first-seen order. When a result
    brings new keys (custom metrics after the first episode, evaluation results), the file
    is rewritten once with the wider header and earlier rows get empty cells there; a key
    missing from a later result gets an empty cell too. Every file is flushed after each
    result, so a crash or a kill loses nothing already logged.
    """

    def __init__(self, trial_dir: str | os.PathLike, config_dict: dict | None = None,
                 tensorboard: bool = True, resume: bool = False, video_frames: bool = False,
                 resumed_at: int | None = None):
        """``resume``: go on after the rows already written; ``resumed_at``, the iteration of
        the checkpoint resumed from: the rows after it, which the run now does again, are
        dropped first, so that each iteration has one row (as Tune's restored trials)."""
        self.trial_dir = Path(trial_dir)
        # Frames of the evaluation videos a result names, as TensorBoard images.
        self.video_frames = video_frames
        self.trial_dir.mkdir(parents=True, exist_ok=True)
        self.result_path = self.trial_dir / "result.json"
        self.progress_path = self.trial_dir / "progress.csv"
        self.params_path = self.trial_dir / "params.json"
        if config_dict is not None:
            text = json.dumps(to_jsonable(config_dict), indent=2, sort_keys=True, allow_nan=False)
            self.params_path.write_text(text + "\n")
        if resume and resumed_at is not None:
            drop_rows_after(self.result_path, self.progress_path, resumed_at)
        self._json = open(self.result_path, "a", encoding="utf-8")
        self._csv_file = None
        self._columns: list[str] = []
        self._rows = 0
        if resume and self.progress_path.exists():  # go on after the rows already there
            with open(self.progress_path, newline="", encoding="utf-8") as f:
                self._columns = next(csv.reader(f), [])
            self._csv_file = open(self.progress_path, "a", newline="", encoding="utf-8")
        self._tb = None
        self._tb_error: OSError | None = None
        if tensorboard:
            # imported here: it pulls in protobuf
            from tensorboardX.event_file_writer import EventsWriter

            # tensorboardX's record format and summaries, written by a thread of ours (each
            # result's scalars are ~0.15 ms apiece to encode, 30 an iteration, while the
            # training thread waits for samples) and flushed every few seconds and at close,
            # not every iteration (~5 ms of a 50 ms PPO iteration). Not its SummaryWriter:
            # that one writes from a thread of its own through a bounded queue, and when a
            # write fails (a full disk) that thread dies with a traceback and the next
            # puts block for ever, so the run hung at its end.
            self._tb = EventsWriter(str(self.trial_dir / "events"))
            self._tb_queue: queue.Queue = queue.Queue()
            self._tb_thread = threading.Thread(target=self._tb_worker, name="rlmesh.tensorboard",
                                               daemon=True)
            self._tb_thread.start()

    def log(self, result: dict) -> None:
        """Append one iteration's result to every file."""
        clean = to_jsonable(result)
        self._json.write(json.dumps(clean, allow_nan=False) + "\n")
        self._json.flush()
        flat = flatten({k: v for k, v in result.items() if k != "config"})
        self._write_csv(flat)
        if self._tb is not None and self._tb_error is None:
            self._tb_queue.put((flat, result))

    def _write_csv(self, flat: dict[str, Any]) -> None:
        known = set(self._columns)
        new = [k for k in flat if k not in known]
        if new:
            self._columns.extend(new)
            self._rewrite_csv()
        writer = csv.DictWriter(self._csv_file, fieldnames=self._columns, restval="")
        writer.writerow({k: _csv_cell(v) for k, v in flat.items()})
        self._csv_file.flush()
        self._rows += 1

    def _rewrite_csv(self) -> None:
        """(Re)open progress.csv with the current columns, keeping the rows written so far."""
        rows = []
        if self._csv_file is not None:
            self._csv_file.close()
            with open(self.progress_path, newline="", encoding="utf-8") as f:
                rows = list(csv.DictReader(f))
        tmp = self.progress_path.with_suffix(".csv.tmp")
        with open(tmp, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=self._columns, restval="")
            writer.writeheader()
            writer.writerows(rows)
        os.replace(tmp, self.progress_path)
        self._csv_file = open(self.progress_path, "a", newline="", encoding="utf-8")

    def _write_tb(self, flat: dict[str, Any], result: dict) -> None:
        from tensorboardX.proto.summary_pb2 import Summary
        from tensorboardX.summary import scalar

        step = as_number(result.get("timesteps_total"))
        if step is None or not math.isfinite(step):
            step = as_number(result.get("training_iteration")) or self._rows
        values = []  # every scalar of the result in one event
        for key, value in flat.items():
            if key in _TB_SKIP or is_new_stack_duplicate(key):
                continue
            number = as_number(value)
            if number is not None and math.isfinite(number):
                values.extend(scalar(TB_PREFIX + key, number).value)
        self._write_event(Summary(value=values), int(step))
        evaluation = result.get("evaluation")
        if self.video_frames and isinstance(evaluation, dict):
            for path in evaluation.get("videos") or ():
                self._add_video_frames(path, int(step))

    def _write_event(self, summary: Any, step: int) -> None:
        from tensorboardX.proto.event_pb2 import Event

        self._tb.write_event(Event(summary=summary, step=step, wall_time=time.time()))

    def _add_video_frames(self, path: str, step: int) -> None:
        """Up to TB_VIDEO_FRAMES frames of the video at ``path``, evenly spaced, as one
        image grid under "evaluation/video" (TensorBoard's own video needs moviepy)."""
        import numpy as np

        from rlmesh.video import count_frames, read_frames

        try:
            every = max(1, -(-count_frames(path) // TB_VIDEO_FRAMES))
            frames = read_frames(path, every)[:TB_VIDEO_FRAMES]
        except Exception as e:  # a video gone or unreadable costs its images, not the run
            logging.getLogger(__name__).warning("video %s not logged to TensorBoard: %s", path, e)
            return
        if frames:
            from tensorboardX.summary import image

            self._write_event(image("evaluation/video", np.stack(frames), dataformats="NHWC"),
                              step)

    def _tb_worker(self) -> None:
        """Writes the queued results' events, flushing at most every TB_FLUSH_SECS while
        results come and once they pause; closes the file at the end (``None``). A failed
        write (a full disk) ends the events with one warning: the training thread meets the
        same disk in result.json and reports it, and the run goes on or ends as it decides."""
        unflushed = False
        last_flush = time.monotonic()
        try:
            while True:
                try:
                    item = self._tb_queue.get(timeout=TB_FLUSH_SECS if unflushed else None)
                except queue.Empty:  # a pause: what was written goes to disk now
                    item = ()
                if item is None:
                    break
                if item:
                    self._write_tb(*item)
                    unflushed = True
                if unflushed and (not item or time.monotonic() - last_flush >= TB_FLUSH_SECS):
                    self._tb.flush()
                    unflushed, last_flush = False, time.monotonic()
            self._tb.close()
        except OSError as e:
            self._tb_error = e
            logging.getLogger(__name__).warning(
                "TensorBoard events in %s stopped: %s", self.trial_dir, e)

    def close(self) -> None:
        """Flush and close every file; safe to call twice."""
        for f in (self._json, self._csv_file):
            if f is not None and not f.closed:
                f.close()
        if self._tb is not None:
            self._tb_queue.put(None)  # after every result logged so far
            self._tb_thread.join()
            self._tb = None

    def __enter__(self) -> "ResultLogger":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
