"""One trial of an experiment (``rlmesh train``, a sweep's trial) once its algorithm is built: the loop of train, log,
checkpoint and stop (``_train_loop``), signals, resuming a trial, and the one-line
messages for the errors a run ends with. ``rlmesh.tune``'s trial workers run the same loop."""

from __future__ import annotations

import difflib
import errno
import os
import signal
import socket
import sys
import time
from pathlib import Path

from rlmesh.tune.experiment import TrainSpec, UsageError

EXIT_FAILED, EXIT_USAGE, EXIT_SIGINT, EXIT_SIGTERM = 1, 2, 130, 143


# --- training ---

class Stopper:
    """The first stop criterion a result meets (value >= threshold), in words."""

    def __init__(self, stop: dict[str, float]):
        # Keys in either RLlib stack's names ("env_runners/episode_return_mean",
        # "sampler_results/episode_reward_mean") are looked up by results.lookup.
        self.stop = dict(stop)
        self._checked_keys = False
        self._pending: list[str] = []

    def met(self, result: dict, warn=print) -> str | None:
        from rlmesh.results import as_number, flatten, lookup

        flat = flatten(result)
        if not self._checked_keys:  # a misspelled key would train forever: stop at once
            self._checked_keys = True
            self._pending = self._check_keys(list(self.stop), flat, warn)
        elif self._pending:  # keys under a group that had not come yet (evaluation/...)
            self._pending = self._check_keys(self._pending, flat, lambda m: None)
        for key, threshold in self.stop.items():
            value = as_number(lookup(flat, key))
            if value is not None and value >= threshold:
                return f"{key} = {value:g} >= {threshold:g}"
        return None

    def _check_keys(self, keys: list[str], flat: dict, warn) -> list[str]:
        """UsageError, naming the closest keys, for a stop key missing from a result where
        its siblings are (a misspelling); the keys under a group not in the results yet
        (evaluation/... before the first evaluation, a custom metric, a policy's statistics
        after an idle first iteration) are returned, to be checked when it comes."""
        from rlmesh.results import result_key

        pending = []
        for key in (k for k in keys if k not in flat and result_key(k) not in flat):
            close = difflib.get_close_matches(key, list(flat), n=3)
            hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
            parent = result_key(key).rpartition("/")[0]
            if not parent or any(k.startswith(parent + "/") for k in flat):
                raise UsageError(f"stop key {key!r} is not in the results, so it would never "
                                 f"stop the run{hint}")
            if not parent.startswith("evaluation"):
                warn(f"stop key {key!r} is not in the results yet{hint}")
            pending.append(key)
        return pending


def check_evaluation_stop(stop: dict[str, float], config) -> None:
    """UsageError for a stop key under evaluation/ in a run that never evaluates."""
    keys = [k for k in stop if k.startswith("evaluation/")]
    if keys and not config.evaluation_interval:
        raise UsageError(f"stop key {keys[0]!r} needs evaluation results: set "
                         "evaluation_interval (e.g. --config '{\"evaluation_interval\": 1}')")


def evaluation_line(ev: dict) -> str:
    """One line for an evaluation's result, under the progress table's row."""
    from rlmesh.results import as_number

    mean = as_number(ev.get("episode_reward_mean"))
    text = (f"evaluation: reward_mean {mean:.1f} over {ev.get('episodes_this_iter', 0)} episodes"
            if mean is not None and mean == mean else "evaluation: no episode ended")
    if ev.get("num_partial_episodes"):
        text += f", {ev['num_partial_episodes']} partial (cut by the step cap or time)"
    for video in ev.get("videos") or ():
        text += f"; video {video}"
    return text


def _exit_now(code: int) -> None:
    """Quit at once (the second Ctrl-C); child processes follow through their lifelines."""
    sys.stdout.flush()
    os.write(2, b"\nrlmesh train: quitting now\n")
    os._exit(code)


class CutShort(Exception):
    """A signalled run's iteration did not end within its grace time."""


class _Signals:
    """First SIGINT/SIGTERM: finish the current iteration, then stop; an iteration that has
    not ended ``grace_s`` seconds later is cut short (``CutShort`` raised where the loop
    waits: an iteration can wait forever, e.g. on samples an env never gives). Second: quit."""

    def __init__(self, grace_s: float = 30.0):
        self.signum: int | None = None
        self.grace_s = grace_s
        self._old = {}

    def __enter__(self):
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM):
            self._old[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc):
        signal.setitimer(signal.ITIMER_REAL, 0)
        for s, handler in self._old.items():
            signal.signal(s, handler)

    def _handle(self, signum, frame):
        if signum == signal.SIGALRM:
            raise CutShort(f"the iteration did not end within {self.grace_s:g} s of "
                           f"{signal.Signals(self.signum).name}")
        if self.signum is not None:
            _exit_now(128 + signum)
            return
        self.signum = signum
        signal.setitimer(signal.ITIMER_REAL, max(self.grace_s, 0.001))
        os.write(2, f"\nrlmesh train: stopping after this iteration, or in {self.grace_s:g} s "
                    "if it has not ended by then (Ctrl-C again to quit at once)\n".encode())


def _save(algo, trial_dir: Path, iteration: int) -> str:
    path = trial_dir / f"checkpoint_{iteration:06d}"
    saved = algo.save(str(path))
    return os.fspath(saved) if isinstance(saved, (str, os.PathLike)) else str(path)


def _one_line(message: str) -> str:
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].endswith(":"):
        return f"{lines[0]} {'; '.join(lines[1:])}"
    return "; ".join(lines)




def policy_error_message(error: BaseException) -> str | None:
    """The one line to print for a policy error, raised here or in another process (then
    a RemoteError naming its type; its remote traceback is not shown); None for others."""
    from rlmesh.driver.mesh import SampleTimeout
    from rlmesh.driver.runner_faults import EnvCrashed
    from rlmesh.policy.policy import POLICY_ERRORS, PolicyError
    from rlmesh.rl.columns import MissingColumn
    from rlmesh.rl.finite import NonFiniteError
    from rlmesh.rl.nested_spaces import ObservationError
    from rlmesh.roles.learner import LearnerOutOfMemory
    from rlmesh.runtime import RemoteError

    # An env that breaks its own space, or hangs, is the user's to fix: one line, no traceback.
    if isinstance(error, (PolicyError, MissingColumn, NonFiniteError, LearnerOutOfMemory,
                          ObservationError, SampleTimeout, EnvCrashed)):
        return f"{type(error).__name__}: {error}"
    if isinstance(error, RemoteError) and error.etype in (*POLICY_ERRORS, "ObservationError"):
        where = f" in {error.actor}" if error.actor else ""
        return f"{error.etype}{where}: {error.remote_msg}"
    return None


def env_error_message(error: BaseException) -> str | None:
    """An env that failed however often it was recreated (EnvError, here or in a runner):
    its one line, then the first traceback; None for other errors."""
    from rlmesh.roles.env_sampler import EnvError
    from rlmesh.runtime import RemoteError

    if isinstance(error, EnvError):
        return str(error)
    if isinstance(error, RemoteError) and error.etype == "EnvError":
        head, _, rest = error.remote_msg.partition("\n")
        return f"{head} in {error.actor or 'an env runner'}\n{rest}"
    return None


#: What a write into the results folder fails with: no space, no quota, too large, no right.
WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EACCES, errno.EROFS, errno.EPERM)


def write_error(e: OSError) -> str:
    """One line for a file that could not be written, with the way out."""
    where = e.filename or "the results folder"
    if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        way = "free space there, or give --local-dir on another disk"
    else:
        way = "make it writable, or give --local-dir a folder you can write"
    return f"cannot write {where}: {e.strerror or e}; {way}"


def resume_into(algo, spec: TrainSpec, trust_code: bool = False) -> tuple[Path, str]:
    """Restore ``algo`` from the newest loadable checkpoint of the trial to go on in,
    saying which newer ones were skipped and why; the trial folder and the checkpoint."""
    from rlmesh.driver.checkpoints import CheckpointError, UntrustedCode

    trial, candidates = find_resume_point(spec)
    skipped = []
    for checkpoint in candidates:
        try:
            algo.restore(checkpoint, trust_code=trust_code)
        except UntrustedCode:  # older checkpoints of the run name the same code: say it once
            raise
        except CheckpointError as e:
            print(f"rlmesh train: skipping {checkpoint}: {_one_line(str(e))}", file=sys.stderr)
            skipped.append(checkpoint)
            continue
        return trial, checkpoint
    raise UsageError(f"--resume: none of the {len(skipped)} checkpoints in {trial} can be "
                     "loaded (see above); start afresh without --resume")


def find_resume_point(spec: TrainSpec) -> tuple[Path, list[str]]:
    """The trial folder to go on in and its checkpoints, newest first; UsageError if none."""
    from rlmesh.driver.checkpoints import remove_stale
    from rlmesh.results import DEFAULT_LOCAL_DIR, safe_name

    root = Path(os.path.expanduser(str(spec.local_dir or DEFAULT_LOCAL_DIR)))
    prefix = f"{safe_name(spec.run)}_{safe_name(spec.env)}_"
    if spec.experiment:
        experiments = [root / safe_name(spec.experiment)]
    else:
        experiments = sorted((d for d in root.glob(f"{prefix}*") if d.is_dir()),
                             key=lambda d: d.stat().st_mtime)
    trials = [t for e in experiments[-1:] for t in e.glob(f"{prefix}*") if t.is_dir()]
    for trial in sorted(trials, key=lambda d: d.stat().st_mtime, reverse=True):
        remove_stale(trial)  # first: a save killed between its renames put back, temps gone
        checkpoints = sorted((c for c in trial.glob("checkpoint_*") if c.is_dir()), reverse=True)
        if checkpoints:
            return trial, [str(c) for c in checkpoints]
    where = experiments[-1] if experiments else root / f"{prefix}*"
    raise UsageError(f"--resume: no checkpoint of {spec.run} on {spec.env} under {where}; "
                     "train with --checkpoint-freq N to have one")


def _trial_id(trial_dir: Path) -> str:
    parts = trial_dir.name.split("_")
    return next((f"{a}_{b}" for a, b in zip(parts, parts[1:]) if b == "00000"), "resumed")


def _train_loop(algo, spec: TrainSpec, trial_dir: Path, trial_id: str, reporter, logger,
                control=None) -> int:
    """Train until a stop criterion, a signal, or ``control`` (a sweep's trial worker: its
    ``decide(result)`` returns {"save": bool, "stop": reason or None}, ``saved(iteration,
    path)`` hears of each checkpoint) ends it; the exit code."""
    stopper = Stopper(spec.stop)
    last_checkpoint, saved_at, iteration, why = None, None, 0, None
    signals = _Signals(spec.stop_grace_s)
    cut_short = None
    try:
        with signals:
            try:
                while not signals.signum:
                    result = algo.train()
                    result.update({k: v for k, v in _tune_fields(trial_id).items()
                                   if k not in result})
                    iteration = int(result.get("training_iteration")
                                    or getattr(algo, "iteration", 0))
                    logger.log(result)
                    reporter.report(result)
                    if isinstance(result.get("evaluation"), dict):
                        reporter.message(evaluation_line(result["evaluation"]))
                    decision = control.decide(result) if control is not None else {}
                    if (spec.checkpoint_freq and iteration % spec.checkpoint_freq == 0) \
                            or decision.get("save"):
                        last_checkpoint, saved_at = _save(algo, trial_dir, iteration), iteration
                        reporter.message(f"checkpoint: {last_checkpoint}")
                        _tracked(logger, last_checkpoint, iteration)
                        if control is not None:
                            control.saved(iteration, last_checkpoint)
                    why = decision.get("stop") or stopper.met(
                        result, warn=lambda m: reporter.message(f"warning: {m}"))
                    if why:
                        break
            except CutShort as e:
                # No final checkpoint: the driver was stopped mid-call, and a save now could
                # wait on the same stuck iteration. The newest periodic one stands.
                cut_short = str(e)
            if cut_short is None and spec.checkpoint_at_end and iteration \
                    and saved_at != iteration:
                last_checkpoint = _save(algo, trial_dir, iteration)
                _tracked(logger, last_checkpoint, iteration)
                if control is not None:
                    control.saved(iteration, last_checkpoint)
    finally:
        reporter.finish()
        logger.close()
        with signals:  # a Ctrl-C while the mesh shuts down quits at once
            algo.stop()
    if cut_short:
        why = f"{cut_short}; iteration {iteration + 1} was cut short"
    elif signals.signum:
        why = f"{signal.Signals(signals.signum).name} after iteration {iteration}"
    print(f"stopped: {why}")
    print(f"results: {trial_dir}  (tensorboard --logdir {trial_dir.parent})")
    print(f"last checkpoint: {last_checkpoint}" if last_checkpoint else
          "last checkpoint: none (save with --checkpoint-freq N or --checkpoint-at-end)")
    if signals.signum:
        return EXIT_SIGINT if signals.signum == signal.SIGINT else EXIT_SIGTERM
    if (untrained := getattr(getattr(algo, "training_watch", None), "reason", None)):
        print(f"rlmesh train: error: {untrained}", file=sys.stderr)  # driver/trained_nothing.py
        return EXIT_FAILED
    return 0


def _tracked(logger, checkpoint: str, iteration: int) -> None:
    """Hand a checkpoint to the experiment trackers, where the logger has them."""
    if hasattr(logger, "checkpoint"):
        logger.checkpoint(checkpoint, iteration)


def _tune_fields(trial_id: str) -> dict:
    """The bookkeeping fields Tune adds to each result, for scripts that read them."""
    return {"trial_id": trial_id, "date": time.strftime("%Y-%m-%d_%H-%M-%S"),
            "timestamp": int(time.time()), "hostname": socket.gethostname(), "pid": os.getpid()}
