"""The ``rlmesh`` command (the console entry point, and ``python -m rlmesh``): the commands
of rlmesh/cli and those of rlmesh/launcher in one parser. It sits above both layers, so
that neither imports the other upward."""

from __future__ import annotations

from typing import Sequence

from rlmesh.cli import main as cli
from rlmesh.launcher.commands import CLUSTER_COMMANDS

COMMANDS = {**cli.COMMANDS, **CLUSTER_COMMANDS}


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main(argv, COMMANDS)


def console() -> None:
    cli.console(COMMANDS)


if __name__ == "__main__":
    console()
