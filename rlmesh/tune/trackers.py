"""Experiment trackers: Weights & Biases and MLflow, one tracker run per trial.

A run's trackers are plain data, ``{"wandb": {options}, "mlflow": {options}}``, so that they
travel to a sweep's trial workers in their spec file. Option names are those of RLlib's
``WandbLoggerCallback`` and ``MLflowLoggerCallback``. ``TrackedLogger`` wraps a
``ResultLogger``: each result goes to the files first, then to every tracker.

Tracker calls run on a thread of their own: a slow or unreachable server must not hold the
training loop (MLflow's HTTP client retries with back-off for minutes). A tracker whose call
fails costs one warning, and is not called again; the run goes on.
"""

from __future__ import annotations

import difflib
import logging
import math
import os
import queue
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: Options per tracker. W&B's beyond RLlib's named ones are wandb.init's (entity, tags, ...).
OPTIONS = {
    "wandb": ("project", "group", "entity", "api_key", "api_key_file", "log_config",
              "upload_checkpoints", "save_checkpoints", "excludes", "tags", "notes", "mode",
              "dir", "job_type", "name"),
    "mlflow": ("tracking_uri", "registry_uri", "experiment_name", "tags", "tracking_token",
               "save_artifact", "log_config"),
}
#: The names a file or a Python caller may give a tracker by (RLlib's class names too).
ALIASES = {"wandb": "wandb", "wandbloggercallback": "wandb", "mlflow": "mlflow",
           "mlflowloggercallback": "mlflow"}
EXTRA = {"wandb": "wandb", "mlflow": "mlflow"}
#: Seconds close() waits for the trackers' queued calls before leaving them behind.
CLOSE_TIMEOUT_S = 60.0
#: MLflow's HTTP client retries an unreachable server 7 times with back-off (minutes): a
#: tracker that is down should cost a warning soon, so fewer, unless the user set them.
MLFLOW_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}


class TrackerError(ValueError):
    """A tracker or tracker option that does not exist; the message names the closest."""


def _closest(word: str, known) -> str:
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.5)
    return f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(known)})"


def normalize(trackers: Any, where: str = "trackers") -> dict[str, dict]:
    """``trackers`` as {"wandb"|"mlflow": options}, checked. Takes a dict by tracker name
    (RLlib's class names too), a list of such one-key dicts, or callback objects of
    rlmesh.tune.integration (their ``tracker`` and ``options``)."""
    if not trackers:
        return {}
    items: list[tuple[Any, Any]] = []
    for entry in (trackers if isinstance(trackers, (list, tuple)) else [trackers]):
        if hasattr(entry, "tracker") and hasattr(entry, "options"):
            items.append((entry.tracker, entry.options))
        elif isinstance(entry, dict):
            items.extend(entry.items())
        elif isinstance(entry, str):
            items.append((entry, {}))
        else:
            raise TrackerError(f"{where}: expected a tracker name with its options, got {entry!r}")
    out: dict[str, dict] = {}
    for name, options in items:
        kind = ALIASES.get(str(name).lower())
        if kind is None:
            raise TrackerError(f"{where}: unknown tracker {name!r}{_closest(str(name), ALIASES)}")
        options = dict(options or {})
        for key in options:
            if key not in OPTIONS[kind]:
                raise TrackerError(f"{where}: unknown {kind} option {key!r}"
                                   f"{_closest(key, OPTIONS[kind])}")
        out.setdefault(kind, {}).update(options)
    return out


def require_packages(trackers: dict[str, dict]) -> None:
    """MissingExtra (one line naming the extra) for a tracker whose package is absent."""
    from rlmesh.extras import require

    for kind in trackers:
        require("wandb" if kind == "wandb" else "mlflow", EXTRA[kind],
                "Weights & Biases tracking" if kind == "wandb" else "MLflow tracking")


def numeric_items(result: dict, excludes=()) -> dict[str, float]:
    """The result's finite numeric values, keys flattened with "/" (config left out)."""
    from rlmesh.results import as_number, flatten

    flat = flatten({k: v for k, v in result.items() if k != "config"})
    out = {}
    for key, value in flat.items():
        number = as_number(value)
        if number is not None and math.isfinite(number) \
                and not any(key.startswith(e) for e in excludes):
            out[key] = number
    return out


class TrackedLogger:
    """A ResultLogger that also sends each result, checkpoint and evaluation video to the
    trackers, on one thread of theirs."""

    def __init__(self, logger, trackers: dict[str, dict], run_name: str, group: str,
                 config: dict | None, trial_dir: str | os.PathLike):
        self.logger = logger
        self.trackers = []
        for kind, options in trackers.items():
            cls = WandbTracker if kind == "wandb" else MlflowTracker
            self.trackers.append(cls(options, run_name, group, config or {}, Path(trial_dir)))
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._work, name="rlmesh.trackers", daemon=True)
        self._thread.start()
        self._enqueue("start")

    def log(self, result: dict) -> None:
        self.logger.log(result)
        step = int(result.get("training_iteration") or 0)
        self._enqueue("log", result, step)
        evaluation = result.get("evaluation")
        if isinstance(evaluation, dict):
            for path in evaluation.get("videos") or ():
                self._enqueue("video", str(path), step)

    def checkpoint(self, path: str, iteration: int) -> None:
        self._enqueue("checkpoint", str(path), iteration)

    def close(self) -> None:
        self.logger.close()
        if self._thread.is_alive():
            self._enqueue("finish")
            self._queue.put(None)
            self._thread.join(CLOSE_TIMEOUT_S)
            if self._thread.is_alive():
                log.warning("trackers: calls still pending after %g s were left behind",
                            CLOSE_TIMEOUT_S)

    def wait(self) -> None:
        """Return once every call queued so far has been made (or has failed)."""
        self._queue.join()

    def _enqueue(self, method: str, *args) -> None:
        self._queue.put((method, args))

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            try:
                self._each(*item)
            finally:
                self._queue.task_done()
        self._queue.task_done()

    def _each(self, method: str, args: tuple) -> None:
        for tracker in self.trackers:
            if tracker.failed:
                continue
            try:
                getattr(tracker, method)(*args)
            except Exception as e:  # noqa: BLE001 - a tracker never ends the run
                tracker.failed = True
                first = (str(e).strip().splitlines() or [type(e).__name__])[0]
                log.warning("%s tracking stopped (%s failed: %s: %s); training goes on",
                            tracker.title, method, type(e).__name__, first[:300])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _Tracker:
    title = ""

    def __init__(self, options: dict, run_name: str, group: str, config: dict, trial_dir: Path):
        self.options, self.run_name, self.group = options, run_name, group
        self.config, self.trial_dir = config, trial_dir
        self.failed = False


class WandbTracker(_Tracker):
    """One W&B run per trial: name = the trial folder, group = the experiment."""

    title = "Weights & Biases"

    def start(self) -> None:
        import wandb

        o = self.options
        key = o.get("api_key")
        if o.get("api_key_file"):
            key = Path(os.path.expanduser(o["api_key_file"])).read_text().strip()
        if key:
            wandb.login(key=key, relogin=True)
        init = {k: o[k] for k in ("entity", "tags", "notes", "mode", "job_type") if k in o}
        self.run = wandb.init(
            project=o.get("project"), group=o.get("group") or self.group,
            name=o.get("name") or self.run_name, dir=o.get("dir") or str(self.trial_dir),
            config=self.config if o.get("log_config", True) else None,
            reinit="create_new", settings=wandb.Settings(console="off"), **init)

    def log(self, result: dict, step: int) -> None:
        self.run.log(numeric_items(result, self.options.get("excludes") or ()), step=step)

    def checkpoint(self, path: str, iteration: int) -> None:
        if not (self.options.get("upload_checkpoints") or self.options.get("save_checkpoints")):
            return
        import wandb

        artifact = wandb.Artifact(f"checkpoint_{self.run.id}", type="model",
                                  metadata={"training_iteration": iteration})
        artifact.add_dir(path)
        self.run.log_artifact(artifact, aliases=["latest", f"iteration_{iteration}"])

    def video(self, path: str, step: int) -> None:
        import wandb

        self.run.log({"evaluation/video": wandb.Video(path)}, step=step)

    def finish(self) -> None:
        self.run.finish()


class MlflowTracker(_Tracker):
    """One MLflow run per trial in the experiment (the option, else the rlmesh experiment),
    tagged with the trial and the experiment; params are the flattened config."""

    title = "MLflow"

    def start(self) -> None:
        for name, value in MLFLOW_ENV.items():
            os.environ.setdefault(name, value)
        o = self.options
        uri = str(o.get("tracking_uri") or "")
        if uri.startswith("file:") or (uri and "://" not in uri):
            # MLflow 3 refuses its file store unless asked: a local path given here is the ask.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        if o.get("tracking_token"):
            os.environ["MLFLOW_TRACKING_TOKEN"] = o["tracking_token"]
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=o.get("tracking_uri"),
                                   registry_uri=o.get("registry_uri"))
        name = o.get("experiment_name") or self.group
        found = self.client.get_experiment_by_name(name)
        exp_id = found.experiment_id if found else self.client.create_experiment(name)
        tags = {"mlflow.runName": self.run_name, "trial_name": self.run_name,
                "rlmesh.experiment": self.group, **{k: str(v) for k, v in
                                                    (o.get("tags") or {}).items()}}
        self.run_id = self.client.create_run(exp_id, tags=tags).info.run_id
        if o.get("log_config", True):
            self._log_params()

    def _log_params(self) -> None:
        from mlflow.entities import Param

        from rlmesh.results import flatten, to_jsonable

        flat = flatten(to_jsonable(self.config))
        params = [Param(k, str(v)[:6000]) for k, v in sorted(flat.items())]
        for i in range(0, len(params), 100):  # log_batch takes at most 100 params a call
            self.client.log_batch(self.run_id, params=params[i:i + 100])

    def log(self, result: dict, step: int) -> None:
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, step)
                   for k, v in numeric_items(result).items()]
        for i in range(0, len(metrics), 1000):  # log_batch's cap on metrics
            self.client.log_batch(self.run_id, metrics=metrics[i:i + 1000])

    def checkpoint(self, path: str, iteration: int) -> None:
        if self.options.get("save_artifact"):
            self.client.log_artifacts(self.run_id, path, artifact_path=Path(path).name)

    def video(self, path: str, step: int) -> None:
        self.client.log_artifact(self.run_id, path, artifact_path="videos")

    def finish(self) -> None:
        self.client.set_terminated(self.run_id)


#: rlmesh train's tracker flags: (dest, tracker, option).
FLAGS = (("wandb_project", "wandb", "project"), ("wandb_group", "wandb", "group"),
         ("wandb_entity", "wandb", "entity"),
         ("wandb_upload_checkpoints", "wandb", "upload_checkpoints"),
         ("mlflow_tracking_uri", "mlflow", "tracking_uri"),
         ("mlflow_experiment_name", "mlflow", "experiment_name"),
         ("mlflow_save_artifact", "mlflow", "save_artifact"))


def add_arguments(p) -> None:
    """rlmesh train's flags for the trackers."""
    g = p.add_argument_group("experiment tracking (docs/tracking.md)")
    g.add_argument("--wandb-project", metavar="P", help="log to Weights & Biases project P "
                   "(one W&B run per trial; needs pip install 'rlmesh[wandb]')")
    g.add_argument("--wandb-group", metavar="G", help="W&B group (default: the experiment)")
    g.add_argument("--wandb-entity", metavar="E", help="W&B entity (team or user)")
    g.add_argument("--wandb-upload-checkpoints", action="store_true", default=None,
                   help="upload each checkpoint as a W&B artifact")
    g.add_argument("--mlflow-tracking-uri", metavar="URI", help="log to MLflow at URI "
                   "(http://..., file:///..., ...; needs pip install 'rlmesh[mlflow]')")
    g.add_argument("--mlflow-experiment-name", metavar="N",
                   help="MLflow experiment (default: the rlmesh experiment)")
    g.add_argument("--mlflow-save-artifact", action="store_true", default=None,
                   help="log each checkpoint as an MLflow artifact")


def from_file_and_flags(exp: dict, args, where: str) -> dict[str, dict]:
    """An experiment's trackers: its file's ``trackers:`` section (or Tune's ``callbacks:``
    list, RLlib's class names accepted), with the flags over them."""
    trackers = normalize(exp.get("trackers"), f"{where}: trackers")
    for kind, options in normalize(exp.get("callbacks"), f"{where}: callbacks").items():
        trackers.setdefault(kind, {}).update(options)
    for dest, kind, option in FLAGS:
        value = getattr(args, dest, None)
        if value is not None:
            trackers.setdefault(kind, {})[option] = value
    return trackers
