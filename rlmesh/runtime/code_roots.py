"""Which of the packages loaded in this process are the user's own code (the ``_code_roots``
a process is started with, import_path.startup_code), told by where each top-level package
lies, not by the files of its submodules."""

from __future__ import annotations

import importlib.metadata
import os
import site
import sys
import sysconfig
from pathlib import Path
from types import ModuleType

#: Packages with a trust rule of their own (import_path.SentCode): never a root, however
#: installed (an editable checkout of rlmesh lies outside site-packages).
OWN_RULE = frozenset({"rlmesh"})


def user_roots() -> set[str]:
    """The top-level packages of sys.modules that are the user's code: each decided once by
    its top-level module's location (``__spec__.origin``, or a namespace package's folders).

    Installed code is code under the interpreter's library folders (stdlib, site-packages,
    dist-packages, the user's site) or a package lying beside the distribution metadata
    that lists it (``pip install --target DIR``). A package with no real location (a
    builtin, a frozen module, a module whose ``__file__`` is relative or ``<frozen ...>``)
    is never taken for the user's: torch.ops' ``__file__`` is ``_ops.py``, which, resolved
    against the working directory, once made torch the user's code."""
    roots: set[str] = set()
    for top in {name.partition(".")[0] for name in list(sys.modules)}:
        if top in sys.stdlib_module_names or top.startswith("_") or top in OWN_RULE:
            continue
        places = _places(sys.modules.get(top))
        if places and not all(_installed(top, place) for place in places):
            roots.add(top)
    return roots


def _places(module: ModuleType | None) -> list[str]:
    """Where a top-level module lies: its file, or a package's folders; absolute paths only
    (anything else says nothing about where the code came from)."""
    if module is None:
        return []
    spec = getattr(module, "__spec__", None)
    found: list[str] = []
    if spec is not None:
        if spec.has_location and isinstance(spec.origin, str):
            found.append(spec.origin)
        found += [str(p) for p in spec.submodule_search_locations or ()]
    else:
        file = getattr(module, "__file__", None)
        found += [file] if isinstance(file, str) else []
    return [os.path.realpath(p) for p in found if os.path.isabs(p)]


def _installed(top: str, place: str) -> bool:
    if any(place.startswith(folder + os.sep) for folder in _library_folders()):
        return True
    # The folder the package lies in: above a module's file or a package's folder, two
    # levels above a package's __init__.py.
    above = os.path.dirname(place)
    return any(_beside_its_metadata(top, folder) for folder in {above, os.path.dirname(above)})


def _library_folders() -> tuple[str, ...]:
    """The interpreter's library folders (of the venv and the base installation) and every
    site-packages or dist-packages folder on sys.path."""
    folders = {sysconfig.get_path(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    for base in {sys.base_prefix, sys.base_exec_prefix}:
        paths = sysconfig.get_paths(vars={"base": base, "platbase": base, "installed_base": base,
                                          "installed_platbase": base})
        folders |= {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    folders |= set(site.getsitepackages()) | {site.getusersitepackages()}
    folders |= {p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages")}
    return tuple(sorted({os.path.realpath(f) for f in folders if f}))


def _beside_its_metadata(top: str, folder: str) -> bool:
    """Whether a distribution an installer put in ``folder`` (its ``.dist-info`` there, not
    a source checkout's ``.egg-info``, whose SOURCES.txt lists the tests too) lists ``top``:
    only that folder is read, not every distribution of the interpreter (0.5 s)."""
    for info in sorted(Path(folder).glob("*.dist-info")):
        dist = importlib.metadata.PathDistribution(info)
        listed = (dist.read_text("top_level.txt") or "").split()
        if top in listed or any(f.parts and f.parts[0] in (top, f"{top}.py")
                                for f in dist.files or ()):
            return True
    return False
