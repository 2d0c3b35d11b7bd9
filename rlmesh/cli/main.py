"""The ``rlmesh`` console entry: argparse subcommands, each imported only when it runs.

Argument definitions live here so ``rlmesh --help`` never imports zmq, numpy or torch.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Sequence


def _stack_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pid", type=int, action="append", default=[], metavar="PID",
                   help="only this process (repeat for several)")
    p.add_argument("--job", metavar="JOB_ID", help="only processes of this job")
    p.add_argument("--json", action="store_true", help="print one JSON document with every report")
    p.add_argument("--timeout", type=float, default=2.0, metavar="S",
                   help="seconds to wait for control threads to answer (default 2)")
    p.add_argument("--root", metavar="DIR",
                   help="run-directory root (default $RLMESH_RUNS_ROOT or /tmp/rlmesh-<uid>)")
    p.add_argument("cluster_file", nargs="?", metavar="CLUSTER_TOML",
                   help="every process on every node of this cluster instead (through its agents)")


def _cluster(command: str):
    return lambda p: importlib.import_module("rlmesh.launcher.cli").add_arguments(p, command)


def _demo_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--actors", type=int, default=4, metavar="N", help="actors to start (default 4)")
    p.add_argument("--seconds", type=float, default=5.0, metavar="S", help="how long to run (default 5)")
    p.add_argument("--mode", choices=("ipc", "tcp", "inproc"), default="ipc",
                   help="transport: local processes over ipc (default), over tcp, or all in one process")


# name -> (module under rlmesh.cli, one-line help, argument definitions)
COMMANDS = {
    "stack": ("stack", "threads, asyncio tasks and blocked loops of every rlmesh process here",
              _stack_args),
    "demo": ("demo", "start a small mesh of actors and show it working", _demo_args),
    # train and rollout define their own arguments; their modules import only the stdlib.
    "train": ("train", "train an algorithm (PPO) on an env, from flags or a tuned-example file",
              lambda p: importlib.import_module("rlmesh.cli.train").add_arguments(p)),
    "rollout": ("rollout", "run a checkpoint's policy in an env and print episode returns",
                lambda p: importlib.import_module("rlmesh.cli.rollout").add_arguments(p)),
    "serve": ("serve", "serve a checkpoint's policy to PolicyClients (inference only)",
              lambda p: importlib.import_module("rlmesh.cli.serve").add_arguments(p)),
    "analyze": ("rlmesh.tune.cli", "a sweep's trials ranked by a metric, and PNG learning curves",
                lambda p: importlib.import_module("rlmesh.tune.cli").add_analyze_arguments(p)),
    # The cluster layer (rlmesh.launcher), each command with a cluster file.
    "launch": ("rlmesh.launcher.cli", "run a cluster file's job: agents on its nodes over SSH, "
               "the actors placed on them, logs home", _cluster("launch")),
    "up": ("rlmesh.launcher.cli", "start the cluster's node agents and hold them", _cluster("up")),
    "down": ("rlmesh.launcher.cli", "stop the cluster's head and everything on its nodes",
             _cluster("down")),
    "status": ("rlmesh.launcher.cli", "nodes, resources and processes of a running cluster",
               _cluster("status")),
    "exec": ("rlmesh.launcher.cli", "run a command on every node of the cluster",
             _cluster("exec")),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlmesh", description="rlmesh: distributed reinforcement learning without Ray")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text, add_args) in COMMANDS.items():
        add_args(sub.add_parser(name, help=help_text, description=help_text))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    name = COMMANDS[args.command][0]
    if args.command == "stack" and args.cluster_file:
        name = "rlmesh.launcher.cli"
    module = importlib.import_module(name if "." in name else f"rlmesh.cli.{name}")
    if args.command == "analyze":
        return int(module.analyze_main(args) or 0)
    return int(module.main(args) or 0)


def console() -> None:
    """The ``rlmesh`` command: ``main`` with the command line, then a quick exit (tests
    call ``main`` in their own process, which must go on)."""
    import signal

    from rlmesh.runtime.quick_exit import exit_process

    # Ctrl-C and SIGTERM stop a run after its iteration and tear its processes down; a parent
    # that started us with them blocked (the mask survives exec: a test runner's thread did)
    # would leave the run deaf to both.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    exit_process(main())


if __name__ == "__main__":
    console()
