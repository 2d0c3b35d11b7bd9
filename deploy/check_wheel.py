"""Check an installed rlmesh wheel from outside the repo (run by `make wheel-check`).

    VENV/bin/python deploy/check_wheel.py REPO_DIR WHEEL

Fails when the wheel lacks a source module (a package missing from pyproject's list),
when rlmesh is imported from anywhere but this venv's site-packages, when a module fails
to import with only the declared dependencies installed, or when a bare `launcher` leaks.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
import sys
import sysconfig
import zipfile
from pathlib import Path

# Where each source folder lands in the wheel (the launcher is rlmesh/launcher, a plain subpackage).
SOURCE_TO_WHEEL = {"rlmesh": "rlmesh"}


def missing_from_wheel(repo: Path, wheel: Path) -> list[str]:
    in_wheel = set(zipfile.ZipFile(wheel).namelist())
    missing = []
    for src, dest in SOURCE_TO_WHEEL.items():
        for path in sorted((repo / src).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            target = f"{dest}/{path.relative_to(repo / src).as_posix()}"
            if target not in in_wheel:
                missing.append(f"{path.relative_to(repo)} (expected {target})")
    return missing


def import_failures(site: Path) -> list[str]:
    import rlmesh

    failures = []
    names = ["rlmesh"] + [
        m.name
        for m in pkgutil.walk_packages(rlmesh.__path__, "rlmesh.", onerror=failures.append)
        if not m.name.endswith("__main__")  # importing it would run the CLI
    ]
    for name in names:
        try:
            module = importlib.import_module(name)
        except Exception as exc:
            failures.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        where = Path(module.__file__ or "").resolve()
        if site not in where.parents:
            failures.append(f"{name} imported from {where}, not from {site}")
    return failures


def main() -> int:
    repo, wheel = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    os.chdir("/")  # nothing may be found through the working directory
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    missing = missing_from_wheel(repo, wheel)
    problems = [f"not in the wheel: {m}" for m in missing] + import_failures(site)
    for required in ("rlmesh.launcher", "rlmesh.wire", "rlmesh.runtime"):
        if required not in sys.modules:
            problems.append(f"{required} was not imported")
    if importlib.util.find_spec("launcher") is not None:
        problems.append("a top-level `launcher` is importable; it must exist only as rlmesh.launcher")
    if problems:
        print("check_wheel: FAILED\n  " + "\n  ".join(problems), file=sys.stderr)
        if missing:
            print("A module missing from the wheel usually means a new package has no "
                  "__init__.py (setuptools finds packages by it: [tool.setuptools.packages.find] "
                  "in pyproject.toml).", file=sys.stderr)
        return 1
    count = sum(1 for name in sys.modules if name == "rlmesh" or name.startswith("rlmesh."))
    print(f"check_wheel: OK: {count} rlmesh modules imported from {site}; no top-level launcher")
    return 0


if __name__ == "__main__":
    sys.exit(main())
