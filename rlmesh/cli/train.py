"""``rlmesh train``: build an algorithm from flags and/or a tuned-example file, train it
until a stop criterion is met, log every result (rlmesh.results) and checkpoint.

Only the standard library is imported at module level: ``rlmesh --help`` builds this
parser, and must stay fast.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import errno
import json
import logging
import os
import signal
import socket
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from rlmesh.algorithms.registry import ALGORITHMS, UnknownAlgorithm, get_config_class

DEFAULT_STOP = {"training_iteration": 100}
# The role in brackets: [driver] here, [env_runner-1], [learner-0], ... from other processes.
LOG_FORMAT = "%(levelname)s [%(role)s] %(name)s: %(message)s"
LOG_FILE = "rlmesh.log"  # in the trial folder: every process's records at log_level
EXIT_FAILED, EXIT_USAGE, EXIT_SIGINT, EXIT_SIGTERM = 1, 2, 130, 143

EPILOG = """\
-f FILE takes YAML, TOML or JSON in either of RLlib's tuned-example shapes:
  {{"run": "PPO", "env": ..., "config": {{...}}, "stop": {{...}}}}   or
  {{"<experiment name>": {{"run": ..., "env": ..., "config": ..., "stop": ...}}}}
A FILE that does not exist is looked up among rlmesh's own tuned examples by name
({examples}). Flags override the file: --config is merged into
the file's config key by key (nested dicts too), --stop replaces the file's stop.

Stop: training ends at the first criterion met, a result value >= its threshold
(nested keys with "/", e.g. "info/learner/default_policy/kl"); without one from
--stop or the file: {default_stop}.

Results: <local-dir>/<experiment>/<run>_<env>_<id>_00000_0_<date>/ with params.json,
result.json, progress.csv, a TensorBoard file and checkpoint_<iteration>/ folders.
Ctrl-C stops after the current iteration (a second one quits at once, exit 130).
--resume goes on from the newest checkpoint of the newest trial of this run and env in
the experiment (--experiment-name, the file's name, or else the newest experiment of
this run and env), logging into the same trial folder. --config-help lists the keys."""


class UsageError(Exception):
    """A problem with the command line or the -f file, printed as one line (exit 2)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    from rlmesh import tuned_examples  # the standard library only

    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = EPILOG.format(examples=", ".join(tuned_examples.names()),
                             default_stop=json.dumps(DEFAULT_STOP))
    p.add_argument("--run", metavar="ALGO", help=f"algorithm to train ({', '.join(ALGORITHMS)})")
    p.add_argument("--env", metavar="ID", help="gymnasium id, registered name or 'pkg.mod:make_env'")
    p.add_argument("-f", "--config-file", metavar="FILE", help="experiment file (see below)")
    p.add_argument("--config", metavar="JSON", help='config overrides, e.g. \'{"lr": 3e-4}\'')
    p.add_argument("--stop", metavar="JSON", help='stop criteria, e.g. \'{"timesteps_total": 1e5}\'')
    p.add_argument("--checkpoint-freq", type=int, metavar="N",
                   help="save a checkpoint every N iterations (default: never)")
    p.add_argument("--checkpoint-at-end", action="store_true", default=None,
                   help="save a checkpoint when training ends (Ctrl-C included)")
    p.add_argument("--local-dir", metavar="DIR", help="results root (default ~/rlmesh_results)")
    p.add_argument("--experiment-name", metavar="NAME",
                   help="experiment folder (default: the file's experiment key, else "
                        "<run>_<env>_<date>)")
    p.add_argument("--resume", action="store_true",
                   help="continue the newest trial from its newest checkpoint (see below)")
    p.add_argument("--trust-code", action="store_true",
                   help="with --resume: load a checkpoint that names code outside rlmesh and "
                        "this run's config (imported and run on loading); a file path (.py) in "
                        "a checkpoint is never run")
    p.add_argument("--num-env-runners", type=int, metavar="N", help="sets num_env_runners")
    p.add_argument("--seed", type=int, metavar="S", help="sets seed")
    p.add_argument("--log-level", type=str.upper, metavar="L",
                   choices=("DEBUG", "INFO", "WARN", "WARNING", "ERROR"),
                   help="sets log_level: DEBUG, INFO, WARN or ERROR")
    p.add_argument("--config-help", action="store_true",
                   help="list the config keys of --run (default PPO) with their docs, and exit")


@dataclasses.dataclass
class TrainSpec:
    """Everything one `rlmesh train` run needs, flags and file merged."""

    run: str
    env: Any
    config: dict
    stop: dict
    experiment: str | None = None
    local_dir: str | None = None
    checkpoint_freq: int = 0
    checkpoint_at_end: bool = False


# --- reading the experiment ---

def _json_arg(flag: str, text: str | None) -> dict | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as e:
        raise UsageError(f"{flag}: not valid JSON ({e})") from None
    if not isinstance(value, dict):
        raise UsageError(f"{flag}: expected a JSON object, got {text}")
    return value


def deep_merge(base: dict, override: dict) -> dict:
    """``base`` updated by ``override``, dicts inside merged key by key."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def config_class(run: str):
    """The config class of ``run``: a registered name (case-insensitive) or an import path
    ``pkg.module:MyAlgorithm``; UsageError if neither."""
    try:
        return get_config_class(run)
    except UnknownAlgorithm as e:
        raise UsageError(str(e)) from None


def canonical_keys(cls, config: dict) -> dict:
    """``config`` with every known spelling (attribute name, alias) turned into its key, so a
    file's "num_workers" and a flag's "num_env_runners" meet; unknown keys stay for from_dict
    to reject with its "did you mean"."""
    spelling = {}
    for row in cls.fields_table():
        for s in (row.name, row.key, *row.aliases):
            spelling[s] = row.key
    return {spelling.get(k, k): v for k, v in config.items()}


def parse_stop(stop: dict, where: str) -> dict[str, float]:
    from rlmesh.results import flatten

    out = {}
    for key, value in flatten(stop).items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UsageError(f"{where}: stop threshold of {key!r} must be a number, got {value!r}")
        out[key] = value
    return out


def resolve_spec(args: argparse.Namespace) -> TrainSpec:
    """Merge the -f file and the flags (flags win) into one TrainSpec."""
    name, exp, where = None, {}, "-f"
    if args.config_file:
        from rlmesh.tuned_examples import ExperimentFileError, load_experiment

        try:
            name, exp, where = load_experiment(args.config_file)
        except ExperimentFileError as e:
            raise UsageError(str(e)) from None
    run = args.run or exp.get("run")
    if not run:
        raise UsageError(f"no algorithm: give --run ({', '.join(ALGORITHMS)}) or run: in a -f file")
    cls = config_class(str(run))
    run = next((n for n in ALGORITHMS if n.lower() == str(run).lower()), str(run))
    config = deep_merge(canonical_keys(cls, exp.get("config") or {}),
                        canonical_keys(cls, _json_arg("--config", args.config) or {}))
    for key, flag in (("num_env_runners", args.num_env_runners), ("seed", args.seed),
                      ("log_level", args.log_level)):
        if flag is not None:
            config[key] = flag
    env = args.env or exp.get("env") or config.get("env")
    if not env:
        raise UsageError("no environment: give --env ID, or env: in the -f file")
    config["env"] = env
    stop_flag = _json_arg("--stop", args.stop)
    if stop_flag is not None:
        stop = parse_stop(stop_flag, "--stop")
    elif exp.get("stop"):
        stop = parse_stop(exp["stop"], where)
    else:
        stop = dict(DEFAULT_STOP)
    freq = args.checkpoint_freq if args.checkpoint_freq is not None else exp.get("checkpoint_freq", 0)
    if not isinstance(freq, int) or freq < 0:
        raise UsageError(f"checkpoint frequency must be an integer >= 0, got {freq!r}")
    return TrainSpec(
        run=run, env=env, config=config, stop=stop,
        experiment=args.experiment_name or name,
        local_dir=args.local_dir or exp.get("local_dir") or exp.get("storage_path"),
        checkpoint_freq=freq,
        checkpoint_at_end=bool(args.checkpoint_at_end or exp.get("checkpoint_at_end", False)))


def make_config(spec: TrainSpec):
    """The validated config object; raises ConfigError before any process starts."""
    config = config_class(spec.run).from_dict(spec.config)
    config.validate()
    return config


def build_algorithm(config):
    """Start the algorithm (tests replace this to train without processes)."""
    return config.build()


def config_help(run: str) -> str:
    """Every config key of ``run`` with type, default and doc, from fields_table()."""
    from rlmesh.config.base import GROUPS
    from rlmesh.results import to_jsonable

    rows = config_class(run).fields_table()
    out = [f"{run} config keys: set them with --config '{{\"key\": value}}' or under "
           "config: in a -f file."]
    for group in GROUPS:
        out += ["", f"{group}:"]
        for row in (r for r in rows if r.group == group):
            also = f"  (also: {', '.join(row.aliases)})" if row.aliases else ""
            out.append(f"  {row.key}: {row.type} = {json.dumps(to_jsonable(row.default))}{also}")
            out += textwrap.wrap(row.doc, 88, initial_indent="      ", subsequent_indent="      ")
    return "\n".join(out)


# --- training ---

class Stopper:
    """The first stop criterion a result meets (value >= threshold), in words."""

    def __init__(self, stop: dict[str, float]):
        # RLlib's older result keys ("sampler_results/episode_reward_mean") are ours unprefixed.
        self.stop = {k.removeprefix("sampler_results/"): v for k, v in stop.items()}
        self._checked_keys = False
        self._pending: list[str] = []

    def met(self, result: dict, warn=print) -> str | None:
        from rlmesh.results import as_number, flatten

        flat = flatten(result)
        if not self._checked_keys:  # a misspelled key would train forever: stop at once
            self._checked_keys = True
            self._pending = self._check_keys(list(self.stop), flat, warn)
        elif self._pending:  # keys under a group that had not come yet (evaluation/...)
            self._pending = self._check_keys(self._pending, flat, lambda m: None)
        for key, threshold in self.stop.items():
            value = as_number(flat.get(key))
            if value is not None and value >= threshold:
                return f"{key} = {value:g} >= {threshold:g}"
        return None

    def _check_keys(self, keys: list[str], flat: dict, warn) -> list[str]:
        """UsageError, naming the closest keys, for a stop key missing from a result where
        its siblings are (a misspelling); the keys under a group not in the results yet
        (evaluation/... before the first evaluation, a custom metric, a policy's statistics
        after an idle first iteration) are returned, to be checked when it comes."""
        pending = []
        for key in (k for k in keys if k not in flat):
            close = difflib.get_close_matches(key, list(flat), n=3)
            hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
            parent = key.rpartition("/")[0]
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


def _exit_now(code: int) -> None:
    """Quit at once (the second Ctrl-C); child processes follow through their lifelines."""
    sys.stdout.flush()
    os.write(2, b"\nrlmesh train: quitting now\n")
    os._exit(code)


class _Signals:
    """First SIGINT/SIGTERM: finish the current iteration, then stop. Second: quit."""

    def __init__(self):
        self.signum: int | None = None
        self._old = {}

    def __enter__(self):
        for s in (signal.SIGINT, signal.SIGTERM):
            self._old[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc):
        for s, handler in self._old.items():
            signal.signal(s, handler)

    def _handle(self, signum, frame):
        if self.signum is not None:
            _exit_now(128 + signum)
            return
        self.signum = signum
        os.write(2, b"\nrlmesh train: stopping after this iteration "
                    b"(Ctrl-C again to quit at once)\n")


def _save(algo, trial_dir: Path, iteration: int) -> str:
    path = trial_dir / f"checkpoint_{iteration:06d}"
    saved = algo.save(str(path))
    return os.fspath(saved) if isinstance(saved, (str, os.PathLike)) else str(path)


def _one_line(message: str) -> str:
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].endswith(":"):
        return f"{lines[0]} {'; '.join(lines[1:])}"
    return "; ".join(lines)


def _fail(error: Exception | str, code: int = EXIT_USAGE) -> int:
    print(f"rlmesh train: error: {_one_line(str(error))}", file=sys.stderr)
    return code


#: Errors in the user's policy code that say all there is to say in one line: a policy class
#: that breaks the contract, a loss that asks for a column the batch lacks, a NaN or inf
#: from an env or in an update (``on_nonfinite``).
POLICY_ERRORS = ("PolicyError", "MissingColumn", "NonFiniteError")


def policy_error_message(error: BaseException) -> str | None:
    """The one line to print for a policy error, raised here or in another process (then
    a RemoteError naming its type; its remote traceback is not shown); None for others."""
    from rlmesh.policy.policy import PolicyError
    from rlmesh.rl.columns import MissingColumn
    from rlmesh.rl.finite import NonFiniteError
    from rlmesh.runtime import RemoteError

    if isinstance(error, (PolicyError, MissingColumn, NonFiniteError)):
        return f"{type(error).__name__}: {error}"
    if isinstance(error, RemoteError) and error.etype in POLICY_ERRORS:
        where = f" in {error.actor}" if error.actor else ""
        return f"{error.etype}{where}: {error.remote_msg}"
    return None


def main(args: argparse.Namespace) -> int:
    from rlmesh.config.base import ConfigError

    try:
        if args.config_help:
            print(config_help(args.run or "PPO"))
            return 0
        spec = resolve_spec(args)
    except (UsageError, ConfigError) as e:
        return _fail(e)
    return run_spec(spec, resume=args.resume, trust_code=args.trust_code)


def run_spec(spec: TrainSpec, resume: bool = False, trust_code: bool = False) -> int:
    """Train as ``spec`` says, with results, progress and checkpoints (``rlmesh train``, and
    ``rlmesh launch``'s job on the head); the exit code."""
    from rlmesh.algorithms.checkpoints import CheckpointError
    from rlmesh.config.base import ConfigError

    try:
        config = make_config(spec)
        config_dict = config.to_dict()
        check_evaluation_stop(spec.stop, config)
    except (UsageError, ConfigError) as e:
        return _fail(e)
    level = str(spec.config.get("log_level", "WARNING")).upper()
    logging.basicConfig(level={"WARN": "WARNING"}.get(level, level), format=LOG_FORMAT)
    from rlmesh.runtime.logtail import RoleFilter, attach_log_file

    for handler in logging.getLogger().handlers:  # LOG_FORMAT reads the role
        if not any(isinstance(f, RoleFilter) for f in handler.filters):
            handler.addFilter(RoleFilter())
    from rlmesh.envs import EnvError

    try:
        algo = build_algorithm(config)
    except (ConfigError, EnvError) as e:
        return _fail(e)
    except Exception as e:
        if (message := policy_error_message(e)) is None:
            raise
        return _fail(message)
    except KeyboardInterrupt:  # started processes follow us out through their lifelines
        print("rlmesh train: interrupted while starting", file=sys.stderr)
        return EXIT_SIGINT
    from rlmesh.results import ResultLogger, default_experiment_name, make_trial_dir

    try:
        if resume:
            trial_dir, checkpoint = resume_into(algo, spec, trust_code)
            trial_id = _trial_id(trial_dir)
            print(f"rlmesh train: resuming from {checkpoint}")
        else:
            experiment = spec.experiment or default_experiment_name(spec.run, spec.env)
            trial_dir, trial_id = make_trial_dir(spec.local_dir, experiment, spec.run, spec.env)
        algo.logdir = str(trial_dir)  # evaluation videos go to its videos/
        logger = ResultLogger(trial_dir, config_dict, resume=resume,
                              video_frames=bool(config_dict.get("evaluation_video_to_tensorboard")))
        log_file = attach_log_file(trial_dir / LOG_FILE, level)
    except (UsageError, CheckpointError) as e:
        algo.stop()
        return _fail(e)
    except OSError as e:  # a results folder that cannot be written
        algo.stop()
        return _fail(write_error(e), EXIT_FAILED)
    except KeyboardInterrupt:  # Ctrl-C before the loop took the signals over
        algo.stop()
        print("rlmesh train: interrupted while starting", file=sys.stderr)
        return EXIT_SIGINT
    except BaseException:
        algo.stop()
        raise
    stops = " or ".join(f"{k} >= {v:g}" for k, v in spec.stop.items())
    print(f"rlmesh train: {spec.run} on {spec.env} until {stops}\nresults: {trial_dir}")
    from rlmesh.algorithms.algorithm import LearnerFailed

    try:
        return _run_loop(algo, spec, trial_dir, trial_id, logger, log_file)
    except LearnerFailed as e:  # the learner died: the message names the checkpoint
        print(f"rlmesh train: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except UsageError as e:  # a stop key that is not in the results
        return _fail(e)
    except OSError as e:  # results or a checkpoint could not be written (a full disk)
        if not e.filename and e.errno not in WRITE_ERRNOS:
            raise
        return _fail(write_error(e), EXIT_FAILED)
    except KeyboardInterrupt:  # in the instant before the loop took the signals over
        print("rlmesh train: interrupted while starting", file=sys.stderr)
        return EXIT_SIGINT
    except Exception as e:  # _train_loop has stopped the algorithm's processes
        if (env_error := env_error_message(e)) is not None:
            head, _, first_traceback = env_error.partition("\n")
            print(f"rlmesh train: error: {head}; its first traceback:\n"
                  f"{textwrap.indent(first_traceback.rstrip(), '  | ')}", file=sys.stderr)
            return EXIT_FAILED
        if (message := policy_error_message(e)) is None:
            raise
        return _fail(message)


def _run_loop(algo, spec: TrainSpec, trial_dir: Path, trial_id: str, logger, log_file) -> int:
    from rlmesh.cli.progress import ProgressReporter

    try:
        return _train_loop(algo, spec, trial_dir, trial_id, ProgressReporter(), logger)
    finally:
        logging.getLogger().removeHandler(log_file)
        log_file.close()


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
    from rlmesh.algorithms.checkpoints import CheckpointError, UntrustedCode

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
        checkpoints = sorted((c for c in trial.glob("checkpoint_*") if c.is_dir()), reverse=True)
        if checkpoints:
            return trial, [str(c) for c in checkpoints]
    where = experiments[-1] if experiments else root / f"{prefix}*"
    raise UsageError(f"--resume: no checkpoint of {spec.run} on {spec.env} under {where}; "
                     "train with --checkpoint-freq N to have one")


def _trial_id(trial_dir: Path) -> str:
    parts = trial_dir.name.split("_")
    return next((f"{a}_{b}" for a, b in zip(parts, parts[1:]) if b == "00000"), "resumed")


def _train_loop(algo, spec: TrainSpec, trial_dir: Path, trial_id: str, reporter, logger) -> int:
    stopper = Stopper(spec.stop)
    last_checkpoint, saved_at, iteration, why = None, None, 0, None
    signals = _Signals()
    try:
        with signals:
            while not signals.signum:
                result = algo.train()
                result.update({k: v for k, v in _tune_fields(trial_id).items() if k not in result})
                iteration = int(result.get("training_iteration") or getattr(algo, "iteration", 0))
                logger.log(result)
                reporter.report(result)
                if isinstance(result.get("evaluation"), dict):
                    reporter.message(evaluation_line(result["evaluation"]))
                if spec.checkpoint_freq and iteration % spec.checkpoint_freq == 0:
                    last_checkpoint, saved_at = _save(algo, trial_dir, iteration), iteration
                    reporter.message(f"checkpoint: {last_checkpoint}")
                why = stopper.met(result, warn=lambda m: reporter.message(f"warning: {m}"))
                if why:
                    break
            if spec.checkpoint_at_end and iteration and saved_at != iteration:
                last_checkpoint = _save(algo, trial_dir, iteration)
    finally:
        reporter.finish()
        logger.close()
        with signals:  # a Ctrl-C while the mesh shuts down quits at once
            algo.stop()
    if signals.signum:
        why = f"{signal.Signals(signals.signum).name} after iteration {iteration}"
    print(f"stopped: {why}")
    print(f"results: {trial_dir}  (tensorboard --logdir {trial_dir.parent})")
    print(f"last checkpoint: {last_checkpoint}" if last_checkpoint else
          "last checkpoint: none (save with --checkpoint-freq N or --checkpoint-at-end)")
    if signals.signum:
        return EXIT_SIGINT if signals.signum == signal.SIGINT else EXIT_SIGTERM
    return 0


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


def _tune_fields(trial_id: str) -> dict:
    """The bookkeeping fields Tune adds to each result, for scripts that read them."""
    return {"trial_id": trial_id, "date": time.strftime("%Y-%m-%d_%H-%M-%S"),
            "timestamp": int(time.time()), "hostname": socket.gethostname(), "pid": os.getpid()}
