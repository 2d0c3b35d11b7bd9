"""Which packages a process is started with as the user's code (``startup_code``'s
``_code_roots``, runtime/import_path.py): decided by where each top-level package lies, never
by a submodule's odd ``__file__`` (torch.ops' is ``_ops.py``: torch was taken for the user's
code, issue 48 point 4). Pure logic on this process's sys.modules: no processes."""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

import gymnasium  # noqa: F401 (installed packages this process has imported)
import numpy  # noqa: F401
import pytest
import torch

from rlmesh.runtime.import_path import startup_code


@pytest.fixture
def on_path(tmp_path, monkeypatch):
    """``tmp_path`` on sys.path; the modules imported from it are forgotten afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        del sys.modules[name]
    importlib.invalidate_caches()


def roots() -> list[str]:
    return startup_code({})["_code_roots"]


def test_installed_packages_are_not_the_users_code_though_a_submodule_has_a_relative_file():
    assert not Path(torch.ops.__file__).is_absolute()  # what misled the old rule
    found = roots()
    for installed in ("torch", "numpy", "gymnasium", "pytest", "msgpack", "zmq"):
        assert installed not in found, found
    # rlmesh's own code has a rule of its own (SentCode: never run by message), whatever
    # way it is installed (this checkout's is editable, outside site-packages).
    assert "rlmesh" not in found
    assert "tests" in found  # these tests are the user's code here


def test_a_module_without_a_real_file_is_not_taken_for_the_users_code(monkeypatch):
    for name, file in (("h_relative_file", "relative.py"), ("h_frozen", "<frozen h_frozen>"),
                       ("h_no_file", None)):
        module = types.ModuleType(name)
        if file is not None:
            module.__file__ = file
        monkeypatch.setitem(sys.modules, name, module)
    found = roots()
    assert not {"h_relative_file", "h_frozen", "h_no_file"} & set(found), found


def test_the_users_packages_modules_and_namespace_packages_are_roots(on_path):
    (on_path / "h_user_pkg").mkdir()
    (on_path / "h_user_pkg" / "__init__.py").write_text("")
    (on_path / "h_user_pkg" / "envs.py").write_text("def make(c): pass\n")
    (on_path / "h_user_mod.py").write_text("")
    (on_path / "h_user_ns" / "sub").mkdir(parents=True)  # no __init__.py anywhere
    (on_path / "h_user_ns" / "sub" / "envs.py").write_text("")
    for name in ("h_user_pkg.envs", "h_user_mod", "h_user_ns.sub.envs"):
        importlib.import_module(name)
    found = roots()
    assert {"h_user_pkg", "h_user_mod", "h_user_ns"} <= set(found), found


def test_a_package_installed_beside_its_metadata_off_site_packages_is_not_the_users(on_path):
    """``pip install --target DIR`` with DIR on PYTHONPATH: the package lies next to the
    distribution's metadata that lists it; the user's own package next to it does not."""
    (on_path / "h_target_pkg").mkdir()
    (on_path / "h_target_pkg" / "__init__.py").write_text("")
    dist = on_path / "h_target_pkg-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: h-target-pkg\nVersion: 1.0\n")
    (dist / "RECORD").write_text("h_target_pkg/__init__.py,,\n")
    (dist / "top_level.txt").write_text("h_target_pkg\n")
    (on_path / "h_beside.py").write_text("")
    importlib.import_module("h_target_pkg")
    importlib.import_module("h_beside")
    found = roots()
    assert "h_target_pkg" not in found and "h_beside" in found, found
