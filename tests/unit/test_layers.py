"""rlmesh's imports point down the layers that docs/architecture.md ("Layers") states, and
no module of rlmesh reaches itself through its imports. Every import statement counts, at
module level and inside functions, and so does ``importlib.import_module("rlmesh...")``
with a literal name; one under ``if TYPE_CHECKING:`` counts for the layers, not for cycles
(it never runs)."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "rlmesh"

# Top to bottom: a module may import its own layer and the ones below it. Each entry is a
# module or a package of rlmesh; the longest one that holds a module names its layer.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("command", ("rlmesh", "rlmesh.__main__")),
    ("launcher", ("rlmesh.launcher",)),
    ("cli", ("rlmesh.cli",)),
    ("tune", ("rlmesh.tune",)),
    ("algorithms", ("rlmesh.algorithms", "rlmesh.tuned_examples", "rlmesh.core", "rlmesh.agents",
                    "rlmesh.experimental", "rlmesh.execution")),
    ("driver", ("rlmesh.driver", "rlmesh.results", "rlmesh.result_rows")),
    ("roles", ("rlmesh.roles", "rlmesh.named_actors")),
    ("config", ("rlmesh.config", "rlmesh.callbacks", "rlmesh.client", "rlmesh.offline",
                "rlmesh.utils", "rlmesh.connectors")),
    ("policy", ("rlmesh.policy", "rlmesh.models", "rlmesh.evaluation")),
    ("envs", ("rlmesh.env", "rlmesh.preprocessing", "rlmesh.video")),
    ("rl", ("rlmesh.rl",)),
    ("runtime", ("rlmesh.runtime", "rlmesh.placement")),
    ("wire", ("rlmesh.wire",)),
    ("base", ("rlmesh.extras", "rlmesh.quick_exit", "rlmesh.ray_compat")),
]


def _modules() -> dict[str, Path]:
    """Every module of rlmesh by dotted name (a package by its own name)."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


MODULES = _modules()


def _owner(name: str) -> str | None:
    """The module of rlmesh that ``name`` (a module, or a name inside one) is."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _nodes(tree: ast.AST, guarded: bool = False) -> Iterator[tuple[ast.AST, bool]]:
    """Every node, and whether it sits in the body of ``if TYPE_CHECKING:`` (never run)."""
    if isinstance(tree, ast.If) and "TYPE_CHECKING" in ast.unparse(tree.test):
        for child in tree.body:
            yield child, True
            yield from _nodes(child, True)
        children: list[ast.AST] = list(tree.orelse)
    else:
        children = list(ast.iter_child_nodes(tree))
    for child in children:
        yield child, guarded
        yield from _nodes(child, guarded)


def _imported(module: str, path: Path, type_only: bool = True) -> dict[str, int]:
    """``{imported module of rlmesh: line}`` for every import in ``path`` (with
    ``type_only``, those under ``if TYPE_CHECKING:`` too). ``from p import x`` runs ``p`` (a
    package's ``__init__``: an edge, unless ``p`` holds the importing module, whose packages
    ran before it) and ``p.x`` where that is a module."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: dict[str, int] = {}
    for node, guarded in _nodes(ast.parse(path.read_text(), str(path))):
        if guarded and not type_only:
            continue
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            names = [f"{base}.{alias.name}" for alias in node.names
                     if f"{base}.{alias.name}" in MODULES]
            if base in MODULES and not module.startswith(base + "."):
                names.append(base)  # not a module's own package: that ran before it
        elif (isinstance(node, ast.Call) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"):
            names = [node.args[0].value]
        for name in names:
            target = _owner(name)
            if target and target != module and target.split(".")[0] == "rlmesh":
                found.setdefault(target, node.lineno)
    return found


# What a module needs, its type hints included: the layers hold for these.
NEEDS = {module: _imported(module, path) for module, path in MODULES.items()}
# What importing a module runs: no cycle among these. A type hint's import under
# TYPE_CHECKING (an Algorithm helper typed with Algorithm) runs nothing, so it makes none.
GRAPH = {module: _imported(module, path, type_only=False) for module, path in MODULES.items()}


def _layer(module: str) -> int:
    best, rank = "", -1
    for i, (_, members) in enumerate(LAYERS):
        for member in members:
            exact_root = member == "rlmesh"  # the package itself, not everything below it
            if (module == member or (not exact_root and module.startswith(member + "."))) \
                    and len(member) > len(best):
                best, rank = member, i
    assert rank >= 0, f"{module} has no layer in LAYERS: add it (and to docs/architecture.md)"
    return rank


def test_every_module_has_a_layer():
    for module in MODULES:
        _layer(module)


def _upward(needs: dict[str, dict[str, int]]) -> list[str]:
    return [f"{module}:{line} imports {target} ({LAYERS[_layer(target)][0]} is above "
            f"{LAYERS[_layer(module)][0]})"
            for module, targets in sorted(needs.items())
            for target, line in sorted(targets.items()) if _layer(target) < _layer(module)]


def test_no_module_imports_a_higher_layer():
    upward = _upward(NEEDS)
    assert not upward, "imports pointing up:\n" + "\n".join(upward)


def test_an_upward_import_is_found():
    """The check above cannot pass vacuously: the wire importing the CLI is refused, and so
    is a roles module importing an algorithm for a type hint only."""
    needs = {"rlmesh.wire.codec": {"rlmesh.cli.train": 7},
             "rlmesh.roles.learner": {"rlmesh.algorithms.ppo": 3, "rlmesh.rl.gae": 4}}
    assert _upward(needs) == [
        "rlmesh.roles.learner:3 imports rlmesh.algorithms.ppo (algorithms is above roles)",
        "rlmesh.wire.codec:7 imports rlmesh.cli.train (cli is above wire)"]


def _cycles() -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for start in GRAPH:
        if start in index:
            continue
        work = [(start, iter(GRAPH[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(GRAPH[nxt])))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))
    return groups


def test_no_import_cycle():
    cycles = _cycles()
    assert not cycles, "import cycles:\n" + "\n".join(
        " <-> ".join(group) + "\n    " + "\n    ".join(
            f"{a}:{GRAPH[a][b]} -> {b}" for a in group for b in GRAPH[a] if b in group)
        for group in cycles)


def test_the_cycle_finder_finds_a_cycle():
    """The check above cannot pass vacuously: a two-module cycle is found."""
    saved = dict(GRAPH)
    try:
        GRAPH["rlmesh.wire.codec"] = {**GRAPH["rlmesh.wire.codec"], "rlmesh.wire.messages": 1}
        GRAPH["rlmesh.wire.messages"] = {**GRAPH["rlmesh.wire.messages"], "rlmesh.wire.codec": 1}
        assert ["rlmesh.wire.codec", "rlmesh.wire.messages"] in _cycles()
    finally:
        GRAPH.clear()
        GRAPH.update(saved)


def test_the_import_scan_sees_function_level_and_importlib_imports(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text("from typing import TYPE_CHECKING\nimport importlib\n"
                      "from . import nested_spaces\n"
                      "if TYPE_CHECKING:\n    from rlmesh.driver.algorithm import Algorithm\n"
                      "def f():\n    from rlmesh.wire import codec\n"
                      "def g():\n    return importlib.import_module('rlmesh.cli.train')\n"
                      # a path handed to another process, not an import:
                      "LATER = 'rlmesh.roles.env_runner:EnvRunner'\n")
    runs = {"rlmesh.rl.nested_spaces", "rlmesh.wire", "rlmesh.wire.codec", "rlmesh.cli.train"}
    assert set(_imported("rlmesh.rl.mod", source, type_only=False)) == runs
    assert set(_imported("rlmesh.rl.mod", source)) == runs | {"rlmesh.driver.algorithm"}


def test_the_architecture_page_states_these_layers():
    """docs/architecture.md's "Layers" block lists the same layers in the same order, each
    with the same packages and modules (``rlmesh/x`` or ``rlmesh/x.py``) as LAYERS."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```", 2)[1]
    stated: list[tuple[str, set[str]]] = []
    for line in block.splitlines():
        match = re.match(r"^(\w+)\s{2,}", line)
        if match:
            stated.append((match.group(1), set()))
        if stated:
            stated[-1][1].update(path.removesuffix(".py").replace("/", ".")
                                 for path in re.findall(r"\brlmesh/[\w.]*\w", line))
    assert [name for name, _ in stated] == [name for name, _ in LAYERS]
    for (name, members), (_, paths) in zip(LAYERS, stated):
        assert set(members) - {"rlmesh"} == paths, f"layer {name}"
