"""The driver's boundary (docs/architecture.md, "The driver"): rlmesh/algorithms/ holds
algorithms only (no asyncio, no threads, no actor handles or remote calls, no reach into
another object's private attributes), and in rlmesh/driver/ only the mesh modules own the
event loop and the remote calls."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "rlmesh"
ALGORITHMS = sorted((ROOT / "algorithms").glob("*.py"))
DRIVER = sorted((ROOT / "driver").glob("*.py"))
#: The modules of the driver that own the event loop and every remote call.
MESH_MODULES = {"mesh.py", "async_mesh.py", "es_mesh.py", "loop.py", "runner_pool.py", "pools.py",
                "on_loop.py", "topologies.py"}
LOOP_MODULES = {"asyncio", "threading", "concurrent", "uvloop"}
REMOTE_CALLS = {"call", "tell", "call_sync", "tell_sync", "stream"}
HANDLE_NAMES = {"ActorHandle", "run_coroutine_threadsafe", "call_soon_threadsafe",
                "ensure_future", "create_task"}


def _imports(tree: ast.AST) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name.split(".")[0]) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.append((node.lineno, node.module.split(".")[0]))
    return out


def loop_imports(tree: ast.AST) -> list[str]:
    """``line: module`` of every import of an event-loop or thread module."""
    return [f"{line}: import {name}" for line, name in _imports(tree) if name in LOOP_MODULES]


def remote_calls(tree: ast.AST) -> list[str]:
    """``x.call(...)``, ``x.tell(...)`` ... anywhere: a remote call made outside the mesh."""
    return [f"{n.lineno}: .{n.func.attr}(...)" for n in ast.walk(tree)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr in REMOTE_CALLS]


def handle_names(tree: ast.AST) -> list[str]:
    found = []
    for n in ast.walk(tree):
        name = n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) else None
        if name in HANDLE_NAMES:
            found.append(f"{n.lineno}: {name}")
        if isinstance(n, ast.alias) and n.name.split(".")[-1] in HANDLE_NAMES:
            found.append(f"import {n.name}")
    return found


def _own(node: ast.expr, modules: set[str]) -> bool:
    """``self``, ``cls``, ``super()``, ``type(self)``: the object's own class chain; or an
    imported module (``torch._foreach_norm`` is torch's API, not a reach into an object)."""
    if isinstance(node, ast.Name):
        return node.id in ("self", "cls") or node.id in modules
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return node.func.id == "super" or (
            node.func.id == "type" and len(node.args) == 1
            and isinstance(node.args[0], ast.Name) and node.args[0].id in ("self", "cls"))
    return False


def private_reaches(tree: ast.AST) -> list[str]:
    """``x._name`` where x is not the object itself (``self``, ``cls``, ``super()``) nor a
    module (``algo._loop``, ``self.mesh._down``, ``config._resolve``), and ``self._loop``
    (the driver's loop, which an algorithm does not hold). Dunder names are public."""
    modules = {(a.asname or a.name).split(".")[0] for n in ast.walk(tree)
               if isinstance(n, ast.Import) for a in n.names}
    found = []
    for n in ast.walk(tree):
        if not isinstance(n, ast.Attribute) or not n.attr.startswith("_") or (
                n.attr.startswith("__") and n.attr.endswith("__")):
            continue
        if not _own(n.value, modules) or n.attr == "_loop":
            found.append(f"{n.lineno}: {ast.unparse(n)}")
    return found


def _tree(path: Path) -> ast.AST:
    return ast.parse(path.read_text(), str(path))


@pytest.mark.parametrize("path", ALGORITHMS, ids=lambda p: p.name)
def test_an_algorithm_module_drives_no_loop_and_no_handle(path: Path) -> None:
    tree = _tree(path)
    found = loop_imports(tree) + remote_calls(tree) + handle_names(tree) + private_reaches(tree)
    assert not found, (f"rlmesh/algorithms/{path.name} reaches past the driver's facade "
                       f"(use Algorithm's and the mesh's public methods): {found}")


@pytest.mark.parametrize("path", [p for p in DRIVER if p.name not in MESH_MODULES],
                         ids=lambda p: p.name)
def test_only_the_mesh_owns_the_loop_and_the_remote_calls(path: Path) -> None:
    tree = _tree(path)
    found = [f for f in loop_imports(tree) if "asyncio" in f or "uvloop" in f]
    found += remote_calls(tree) + handle_names(tree)
    assert not found, (f"rlmesh/driver/{path.name} drives the event loop or an actor itself "
                       f"(that belongs to the mesh, {sorted(MESH_MODULES)}): {found}")


def test_the_driver_reaches_the_algorithm_through_public_attributes() -> None:
    """No module of the driver reads another object's private attribute (``algo._x``)."""
    found = {p.name: private_reaches(_tree(p)) for p in DRIVER}
    # self._loop is the mesh's own loop in the mesh modules
    found = {name: [f for f in hits if not (name in MESH_MODULES and "self._loop" in f)]
             for name, hits in found.items()}
    assert not {k: v for k, v in found.items() if v}


def test_the_checks_see_what_they_forbid() -> None:
    """The detectors themselves: each finds the construct it names (a check that cannot
    fail is no check)."""
    bad = ast.parse("import asyncio\nfrom concurrent.futures import wait\n"
                    "x = runner.call('sample')\nh: ActorHandle\n"
                    "algo._loop.run(c)\nself._loop.run(c)\nself.mesh._down\n"
                    "asyncio.run_coroutine_threadsafe(c, l)\n")
    assert len(loop_imports(bad)) == 2
    assert not loop_imports(ast.parse("import numpy\n"))
    assert remote_calls(bad) == ["3: .call(...)"]
    assert {h.split(": ")[1] for h in handle_names(bad)} == {"ActorHandle",
                                                             "run_coroutine_threadsafe"}
    assert sorted(r.split(": ")[1] for r in private_reaches(bad)) == [
        "algo._loop", "self._loop", "self.mesh._down"]
    good = ast.parse("import torch\nself._requests = {}\nself.mesh.runners.sample(5)\n"
                     "cls._template\nx.__name__\nsuper()._checks()\ntype(self)._defaults\n"
                     "torch._foreach_norm(x)\n")
    assert not (loop_imports(good) + remote_calls(good) + handle_names(good)
                + private_reaches(good))
