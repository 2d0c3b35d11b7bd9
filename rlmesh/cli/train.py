"""``rlmesh train``: build an algorithm from flags and/or a tuned-example file, train it
until a stop criterion is met, log every result (rlmesh.results) and checkpoint.

Only the standard library is imported at module level: ``rlmesh --help`` builds this
parser, and must stay fast.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import textwrap
from pathlib import Path

from rlmesh.driver.algorithm_registry import ALGORITHMS
from rlmesh.tune.experiment import (DEFAULT_STOP, TrainSpec, build_algorithm, canonical_keys,
                                    config_class, deep_merge, make_config, parse_stop, used_config)
from rlmesh.tune.train_loop import (EXIT_FAILED, EXIT_SIGINT, EXIT_USAGE, WRITE_ERRNOS,
                                    UsageError, _one_line, _train_loop, _trial_id,
                                    check_evaluation_stop, env_error_message,
                                    policy_error_message, resume_into, write_error)

# The role in brackets: [driver] here, [env_runner-1], [learner-0], ... from other processes.
LOG_FORMAT = "%(levelname)s [%(role)s] %(name)s: %(message)s"
LOG_FILE = "rlmesh.log"  # in the trial folder: every process's records at log_level

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
A run whose learner never updated though the config says it should have by then exits 1
with one line saying so (docs/tune.md, Failed trials).
Ctrl-C stops after the current iteration (a second one quits at once, exit 130).
--resume goes on from the newest checkpoint of the newest trial of this run and env in
the experiment (--experiment-name, the file's name, or else the newest experiment of
this run and env), logging into the same trial folder. --config-help lists the keys."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    from rlmesh import tuned_examples  # the standard library only

    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = EPILOG.format(examples=", ".join(tuned_examples.names()),
                             default_stop=json.dumps(DEFAULT_STOP))
    p.add_argument("--run", "--algo", dest="run", metavar="ALGO",
                   help=f"algorithm to train ({', '.join(ALGORITHMS)})")
    p.add_argument("--env", metavar="ID", help="gymnasium id, registered name or 'pkg.mod:make_env'")
    p.add_argument("-f", "--config-file", metavar="FILE", help="experiment file (see below)")
    p.add_argument("--config", metavar="JSON", help='config overrides, e.g. \'{"lr": 3e-4}\'')
    p.add_argument("--stop", metavar="JSON", help='stop criteria, e.g. \'{"timesteps_total": 1e5}\'')
    p.add_argument("--checkpoint-freq", type=int, metavar="N",
                   help="save a checkpoint every N iterations (default: never)")
    p.add_argument("--checkpoint-at-end", action="store_true", default=None,
                   help="save a checkpoint when training ends (Ctrl-C included)")
    p.add_argument("--stop-grace", type=float, default=30.0, metavar="S",
                   help="after Ctrl-C or SIGTERM, seconds to let the iteration end before it is "
                        "cut short and the run stops without a final checkpoint (default 30)")
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
    from rlmesh.cli.sweep import add_sweep_arguments  # the standard library only

    add_sweep_arguments(p)
    from rlmesh.tune import trackers  # the standard library only

    trackers.add_arguments(p)
    p.add_argument("--defaults", choices=("auto", "rlmesh", "rllib"), default="auto",
                   help="values of the keys a -f file leaves out: 'rllib' RLlib's (its old "
                        "or new API stack's, as the file reads), 'rlmesh' rlmesh's; 'auto' "
                        "(default): RLlib's for a file that spells a key as only RLlib does "
                        "(framework, num_workers, num_sgd_iter, ...), as its tuned examples do")
    p.add_argument("--config-help", action="store_true",
                   help="list the config keys of --run (default PPO) with their docs, and exit")


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


def resolve_specs(args: argparse.Namespace) -> list[tuple[TrainSpec, dict]]:
    """Each experiment of the -f file (one without a file) merged with the flags, and the
    experiment's raw dict (a sweep reads num_samples from it)."""
    if not args.config_file:
        return [(spec_from(args, None, {}, "-f"), {})]
    from rlmesh.tuned_examples import ExperimentFileError, load_experiments

    try:
        experiments, where = load_experiments(args.config_file)
    except ExperimentFileError as e:
        raise UsageError(str(e)) from None
    return [(spec_from(args, name, exp, where), exp) for name, exp in experiments]


def resolve_spec(args: argparse.Namespace) -> TrainSpec:
    """Merge the -f file and the flags (flags win) into one TrainSpec."""
    specs = resolve_specs(args)
    if len(specs) > 1:
        raise UsageError(f"{args.config_file} holds {len(specs)} experiments; give it one")
    return specs[0][0]


def spec_from(args: argparse.Namespace, name: str | None, exp: dict, where: str) -> TrainSpec:
    """One experiment of the file merged with the flags (flags win)."""
    run = args.run or exp.get("run")
    if not run:
        raise UsageError(f"no algorithm: give --run ({', '.join(ALGORITHMS)}) or run: in a -f file")
    cls = config_class(str(run))
    run = next((n for n in ALGORITHMS if n.lower() == str(run).lower()), str(run))
    file_config = exp.get("config") or {}
    config = deep_merge(canonical_keys(cls, file_config),
                        canonical_keys(cls, _json_arg("--config", args.config) or {}))
    config = with_rllib_defaults(cls, config, file_config, getattr(args, "defaults", "auto"),
                                 where)
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
    from rlmesh.tune.trackers import TrackerError, from_file_and_flags

    try:
        trackers = from_file_and_flags(exp, args, where)
    except TrackerError as e:
        raise UsageError(str(e)) from None
    return TrainSpec(
        run=run, env=env, config=config, stop=stop, trackers=trackers,
        experiment=args.experiment_name or name,
        local_dir=args.local_dir or exp.get("local_dir") or exp.get("storage_path"),
        checkpoint_freq=freq,
        checkpoint_at_end=bool(args.checkpoint_at_end or exp.get("checkpoint_at_end", False)),
        stop_grace_s=args.stop_grace)


def with_rllib_defaults(cls, config: dict, file_config: dict, choice: str, where: str) -> dict:
    """``config`` over RLlib's defaults when the file is RLlib's (``--defaults``; 'auto': a
    file that spells a key as only RLlib does, framework included), written out key by key so
    that sweeps, cluster jobs and params.json carry them; one line says so."""
    from rlmesh.config import rllib

    marks = rllib.rllib_keys_in(cls, file_config)
    if choice == "rlmesh" or (choice == "auto" and not marks):
        return config
    stack = rllib.stack_of(file_config)
    defaults = rllib.defaults_for(cls, stack)
    why = "--defaults rllib" if choice == "rllib" else f"it sets {', '.join(marks[:3])}"
    print(f"rlmesh train: {where} reads as RLlib's ({why}): keys it leaves out take RLlib's "
          f"{stack} API stack defaults ({len(defaults)} differ from rlmesh's; "
          f"--defaults rlmesh keeps rlmesh's)", file=sys.stderr)
    return deep_merge(defaults, config)


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

def _fail(error: Exception | str, code: int = EXIT_USAGE) -> int:
    print(f"rlmesh train: error: {_one_line(str(error))}", file=sys.stderr)
    return code


def main(args: argparse.Namespace) -> int:
    from rlmesh.config.base import ConfigError

    try:
        if args.config_help:
            print(config_help(args.run or "PPO"))
            return 0
        specs = resolve_specs(args)
        from rlmesh.cli.sweep import is_sweep

        if len(specs) > 1 or any(is_sweep(spec, exp, args) for spec, exp in specs):
            from rlmesh.cli.sweep import run_sweeps

            return run_sweeps(specs, args)
        spec = specs[0][0]
    except (UsageError, ConfigError) as e:
        return _fail(e)
    return run_spec(spec, resume=args.resume, trust_code=args.trust_code)


def run_spec(spec: TrainSpec, resume: bool = False, trust_code: bool = False) -> int:
    """Train as ``spec`` says, with results, progress and checkpoints (``rlmesh train``, and
    ``rlmesh launch``'s job on the head); the exit code."""
    from rlmesh.config.base import ConfigError

    from rlmesh.extras import MissingExtra
    from rlmesh.tune.trackers import require_packages

    try:
        config = make_config(spec)
        config_dict = config.to_dict()
        check_evaluation_stop(spec.stop, config)
        require_packages(spec.trackers)
    except (UsageError, ConfigError, MissingExtra) as e:
        return _fail(e)
    level = str(spec.config.get("log_level", "WARNING")).upper()
    logging.basicConfig(level={"WARN": "WARNING"}.get(level, level), format=LOG_FORMAT)
    from rlmesh.runtime.logtail import NoDetailFilter, RoleFilter, attach_log_file

    for handler in logging.getLogger().handlers:  # LOG_FORMAT reads the role
        if not any(isinstance(f, RoleFilter) for f in handler.filters):
            handler.addFilter(RoleFilter())
        console = getattr(handler, "stream", None) in (sys.stderr, sys.stdout)
        if console and not any(isinstance(f, NoDetailFilter) for f in handler.filters):
            handler.addFilter(NoDetailFilter())
    from rlmesh.env.registry import EnvError

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
    from rlmesh.driver.checkpoints import CheckpointError, remove_stale_under  # torch: now
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
        # params.json: what the run uses, the defaults that depend on the env's
        # observations resolved ('auto', config.for_observations)
        config_dict = used_config(algo, config).to_dict()
        # Saves of earlier runs killed mid-write left temp folders in their own trials.
        remove_stale_under(trial_dir.parent.parent, depth=2)
        logger = ResultLogger(trial_dir, config_dict, resume=resume,
                              resumed_at=algo.iteration if resume else None,
                              video_frames=bool(config_dict.get("evaluation_video_to_tensorboard")))
        if spec.trackers:
            from rlmesh.tune.trackers import TrackedLogger

            logger = TrackedLogger(logger, spec.trackers, trial_dir.name,
                                   trial_dir.parent.name, config_dict, trial_dir)
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
    from rlmesh.driver.algorithm import LearnerFailed

    try:
        return _run_loop(algo, spec, trial_dir, trial_id, logger, log_file)
    except LearnerFailed as e:  # the learner died: the message names the checkpoint
        # A learner process killed by a signal left no traceback anywhere: name the run's log.
        where = (f"its traceback: {e.log_path}" if e.log_path else
                 f"its traceback: {trial_dir / LOG_FILE}" if algo.config.num_learners == 0 else
                 f"the run's log: {trial_dir / LOG_FILE}")
        print(f"rlmesh train: error: {e}\n{where}", file=sys.stderr)
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
