"""The commands of this layer (train, rollout, serve, stack, demo, analyze) as argparse
subcommands, each module imported only when it runs; ``rlmesh/__main__.py``, the ``rlmesh``
command, adds the launcher's cluster commands to this table (the launcher sits above).

Argument definitions live here so ``rlmesh --help`` never imports zmq, numpy or torch.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Callable, NamedTuple, Sequence


def _stack_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pid", type=int, action="append", default=[], metavar="PID",
                   help="only this process (repeat for several)")
    p.add_argument("--job", metavar="JOB_ID", help="only processes of this job")
    p.add_argument("--json", action="store_true", help="print one JSON document with every report")
    p.add_argument("--timeout", type=float, default=2.0, metavar="S",
                   help="seconds to wait for control threads to answer (default 2)")
    p.add_argument("--root", metavar="DIR",
                   help="run-directory root (default $RLMESH_RUNS_ROOT or /tmp/rlmesh-<uid>)")


def _demo_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--actors", type=int, default=4, metavar="N", help="actors to start (default 4)")
    p.add_argument("--seconds", type=float, default=5.0, metavar="S", help="how long to run (default 5)")
    p.add_argument("--mode", choices=("ipc", "tcp", "inproc"), default="ipc",
                   help="transport: local processes over ipc (default), over tcp, or all in one process")


class Command(NamedTuple):
    """One subcommand: ``run(args)`` is ``module:function``, imported when it runs."""

    run: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]


def _analyze_args(p: argparse.ArgumentParser) -> None:
    importlib.import_module("rlmesh.cli.sweep").add_analyze_arguments(p)


def _arguments_of(module: str) -> Callable[[argparse.ArgumentParser], None]:
    # train, rollout and serve define their own arguments; their modules import only the stdlib.
    return lambda p: importlib.import_module(module).add_arguments(p)


COMMANDS: dict[str, Command] = {
    "stack": Command("rlmesh.cli.stack:main",
                     "threads, asyncio tasks and blocked loops of every rlmesh process here",
                     _stack_args),
    "demo": Command("rlmesh.cli.demo:main", "start a small mesh of actors and show it working",
                    _demo_args),
    "train": Command("rlmesh.cli.train:main",
                     "train an algorithm (PPO) on an env, from flags or a tuned-example file",
                     _arguments_of("rlmesh.cli.train")),
    "rollout": Command("rlmesh.cli.rollout:main",
                       "run a checkpoint's policy in an env and print episode returns",
                       _arguments_of("rlmesh.cli.rollout")),
    "serve": Command("rlmesh.cli.serve:main",
                     "serve a checkpoint's policy to PolicyClients (inference only)",
                     _arguments_of("rlmesh.cli.serve")),
    "analyze": Command("rlmesh.cli.sweep:analyze_main",
                       "a sweep's trials ranked by a metric, and PNG learning curves",
                       _analyze_args),
}


def build_parser(commands: dict[str, Command] = COMMANDS) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlmesh", description="rlmesh: distributed reinforcement learning without Ray")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, command in commands.items():
        command.add_arguments(sub.add_parser(name, help=command.help, description=command.help))
    return parser


def main(argv: Sequence[str] | None = None, commands: dict[str, Command] = COMMANDS) -> int:
    parser = build_parser(commands)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    module, _, function = commands[args.command].run.partition(":")
    from rlmesh.runtime.run_dir import BadKeepCount, UnsafeRunsRoot  # after parsing: --help
    # imports nothing

    try:
        return int(getattr(importlib.import_module(module), function)(args) or 0)
    except (UnsafeRunsRoot, BadKeepCount) as e:  # before any process of the run was started
        print(f"rlmesh {args.command}: error: {e}", file=sys.stderr)
        return 2


def console(commands: dict[str, Command] = COMMANDS) -> None:
    """A command line of ``commands``: ``main``, then a quick exit (tests call ``main`` in
    their own process, which must go on)."""
    import os
    import signal
    import sys

    from rlmesh.quick_exit import exit_process

    # The working directory is importable, as `python -m rlmesh` makes it: `--run
    # examples.custom_policy:RandomAlgo` or `--env my_envs:make` from the project's root
    # find the user's modules (the console script's own sys.path[0] is its bin folder).
    # An absolute path, so the run's child processes are handed it too.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())

    # Ctrl-C and SIGTERM stop a run after its iteration and tear its processes down; a parent
    # that started us with them blocked (the mask survives exec: a test runner's thread did)
    # would leave the run deaf to both.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    exit_process(main(None, commands))


if __name__ == "__main__":
    console()
