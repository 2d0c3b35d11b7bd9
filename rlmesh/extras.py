"""Optional dependencies: ``require`` imports one or says, in one line, which extra to
install. The core install stays slim; every extra is listed in pyproject.toml."""

from __future__ import annotations

import importlib
from types import ModuleType


class MissingExtra(ImportError):
    """An optional package is not installed; the message names the pip extra that has it."""


def require(module: str, extra: str, what: str) -> ModuleType:
    """Import ``module`` for ``what`` (e.g. "Parquet output"), or raise MissingExtra naming
    ``pip install 'rlmesh[extra]'``."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        if e.name is not None and e.name.split(".")[0] != module.split(".")[0]:
            raise  # the package is there but broken inside: show the real error
        raise MissingExtra(f"{what} needs the {module.split('.')[0]} package: "
                           f"pip install 'rlmesh[{extra}]'") from None
