"""``rlmesh train`` on a sweep (search spaces, num_samples, several experiments in the -f
file) and ``rlmesh analyze EXPERIMENT_DIR``. Only the standard library at module level:
``rlmesh --help`` reads these arguments."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_sweep_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sweeps (a config value that is a search space, e.g. "
                             "'{\"lr\": {\"grid_search\": [1e-3, 1e-4]}}', or --num-samples N)")
    g.add_argument("--num-samples", type=int, metavar="N",
                   help="repeat the grid N times, drawing the random spaces anew (default 1)")
    g.add_argument("--metric", metavar="KEY",
                   help="result key that ranks trials, nested with '/', in either RLlib "
                        "stack's names (default episode_reward_mean, the same value as "
                        "env_runners/episode_return_mean)")
    g.add_argument("--mode", choices=("max", "min"), default="max", help="max (default) or min")
    g.add_argument("--max-concurrent-trials", type=int, metavar="N",
                   help="at most N trials at once (default: as many as the machine fits)")
    g.add_argument("--search-alg", choices=("variant", "optuna", "tpe", "optuna_random"),
                   help="variant: grid and random draws (default); optuna/tpe: Optuna's TPE; "
                        "optuna_random: Optuna's random sampler")
    g.add_argument("--scheduler", choices=("fifo", "asha", "median"),
                   help="stop bad trials early with Optuna's successive halving (asha) or "
                        "median pruner (default fifo: none)")
    g.add_argument("--grace-period", type=int, default=1, metavar="N",
                   help="iterations before a trial may be pruned (default 1)")


def is_sweep(spec, exp: dict, args) -> bool:
    from rlmesh.tune.spaces import has_domains

    samples = args.num_samples or exp.get("num_samples") or 1
    return has_domains(spec.config) or samples > 1


def run_sweeps(specs: list, args) -> int:
    """Each experiment of the file as a sweep, one after another; the exit code."""
    from rlmesh.extras import MissingExtra
    from rlmesh.tune.api import run
    from rlmesh.tune.legacy import TuneError
    from rlmesh.tune.spaces import SpaceError

    for spec, exp in specs:
        try:
            analysis = run(
                spec.run, config=spec.config, stop=spec.stop,
                num_samples=args.num_samples or exp.get("num_samples") or 1,
                metric=args.metric, mode=args.mode, search_alg=args.search_alg,
                scheduler=None if args.scheduler in (None, "fifo") else args.scheduler,
                max_concurrent_trials=args.max_concurrent_trials, name=spec.experiment,
                local_dir=spec.local_dir, checkpoint_freq=spec.checkpoint_freq,
                resume=args.resume, grace_period=args.grace_period, callbacks=spec.trackers)
        except TuneError as e:  # the trials failed: their logs say why
            print(f"rlmesh train: {e}", file=sys.stderr)
            return 1
        except (SpaceError, ValueError, FileExistsError, FileNotFoundError, RuntimeError,
                MissingExtra) as e:
            print(f"rlmesh train: error: {e}", file=sys.stderr)
            return 2
        if analysis.interrupted:
            print(f"rlmesh train: interrupted; go on with the same command and --resume "
                  f"({analysis.experiment_dir})", file=sys.stderr)
            return 130
    return 0


# --- rlmesh analyze ---

def add_analyze_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("experiment_dir", metavar="EXPERIMENT_DIR", help="a sweep's experiment folder")
    p.add_argument("--metric", metavar="KEY", help="rank by this result key (default: the "
                   "sweep's metric)")
    p.add_argument("--mode", choices=("max", "min"), help="max or min (default: the sweep's)")
    p.add_argument("--no-plot", action="store_true", help="print the table only")


def analyze_main(args) -> int:
    from rlmesh.tune.analysis import ExperimentAnalysis

    try:
        analysis = ExperimentAnalysis.from_dir(args.experiment_dir, args.metric, args.mode)
    except (FileNotFoundError, ValueError) as e:
        print(f"rlmesh analyze: error: {e}", file=sys.stderr)
        return 2
    print(analysis.summary())
    if not args.no_plot:
        from rlmesh.extras import MissingExtra
        from rlmesh.tune.plots import plot_trials

        try:
            paths = plot_trials(analysis, Path(args.experiment_dir) / "plots")
        except MissingExtra as e:
            print(f"rlmesh analyze: no plots: {e}", file=sys.stderr)
            return 1
        print(f"plots: {len(paths)} PNG files in {Path(args.experiment_dir) / 'plots'}")
    return 0
