"""The role tables: every actor class of rlmesh declares what it serves, every remote call
made anywhere in rlmesh/ names a declared call of its kind, docs/architecture.md's
"Protocol" table is the declarations, and the tables are pinned to the wire version.

``python -m tests.unit.test_protocol_table`` prints the table for the docs.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import pathlib
import re
from typing import Any, Iterator

import pytest

from rlmesh.runtime import Actor
from rlmesh.runtime.actor import table_of
from rlmesh.runtime.protocol import CALL, STREAM, TELL, TEST_HOOK, Entry, Table
from rlmesh.wire import messages as M

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "rlmesh"
DOC = ROOT / "docs" / "architecture.md"

# Actor classes of rlmesh that declare no protocol of their own, and why.
UNDECLARED = {
    "rlmesh.named_actors:NamedActorHost": "becomes the user's class (its public methods)",
    "rlmesh.named_actors:_Hosted": "serves a user's plain class: its public methods",
}
# The table of each wire protocol version (a digest of the rendered role tables). A change to
# a role's calls, kinds, requests or replies is a new protocol: bump PROTOCOL_VERSION.
FINGERPRINTS = {2: "14f5ee7c6b1709c8", 3: "e107a26dc06f7250", 4: "b8313f061e0ae69a",
                5: "da1b681346d14006", 6: "6a80e3f62936f1ed",
                7: "05b5e44b3ca10654", 8: "98062f917405da16", 9: "72b5463f019153c8",
                10: "4985e155b6a2e71b"}
# Receivers whose ``tell`` is not an actor's (an optuna study, files).
NOT_HANDLES = ("study",)
# The calling forms themselves (a stream's items name the call the stream was opened for).
MACHINERY = ("rlmesh/runtime/", "rlmesh/wire/")
# Call names that come from the user at run time, refused by the runner if not declared:
# foreach_env_runner("metrics") / foreach_env_runner_async(fn), RLlib's foreach_worker; a
# named actor's methods (the user's class); the path of an HTTP request to the policy server
# (checked against the server's table when it arrives).
USER_NAMED = {"rlmesh/driver/env_runner_group.py": "method", "rlmesh/named_actors.py": "self._method",
              "rlmesh/roles/policy_http.py": "call",
              # named by the topologies' declarations: tests/unit/test_topology.py checks them
              "rlmesh/driver/mesh.py": "declared"}
_SITES = {"call": CALL, "call_sync": CALL, "tell": TELL, "tell_sync": TELL, "stream": STREAM}


# --- the roles ---

def actor_classes() -> list[type]:
    """Every Actor subclass defined in rlmesh/ (modules found by their class statements)."""
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        # A class statement naming a base that may be an actor: Actor, or a role subclassed.
        if re.search(r"^class \w+\(.*(Actor|Runner|Server|Shard|Aggregator).*\):", text, re.M):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            importlib.import_module(module.removesuffix(".__init__"))
    found, todo = [], list(Actor.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if cls.__module__.startswith("rlmesh."):
            found.append(cls)
    return sorted(set(found), key=lambda c: (c.__module__, c.__qualname__))


def path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def declared_roles() -> list[type]:
    return [c for c in actor_classes() if path(c) not in UNDECLARED]


def test_every_actor_class_of_rlmesh_declares_its_protocol():
    classes = actor_classes()
    assert len(classes) >= 12  # the roles, the node agent, the demo's actors
    for cls in classes:
        if path(cls) in UNDECLARED:
            continue
        assert "protocol" in vars(cls), f"{path(cls)} declares no protocol"
        table = table_of(cls, hooks=True)  # every declared name is a method of the class
        assert table.entries, path(cls)


# --- the table as the docs show it ---

def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _kinds(entry: Entry, hooks: tuple[str, ...]) -> str:
    return TEST_HOOK if entry.name in hooks else ", ".join(entry.kinds)


def _row_of(entry: Entry, hooks: tuple[str, ...]) -> tuple[str, str, str, str]:
    return (entry.name, _kinds(entry, hooks), entry.request_text(), entry.reply)


def table_rows(cls: type) -> Iterator[tuple[str, str, str, str, str]]:
    """(role, call, kind, request, reply) rows of one role; a role extending another
    documented role lists what it adds. Its constructor comes first, as kind ``spawn``."""
    table = table_of(cls, hooks=True)
    hooks = table.protocol.test_hooks
    base = next((b for b in cls.__mro__[1:] if b in declared_roles()), None)
    inherited = {}
    if base is not None:
        base_table = table_of(base, hooks=True)
        inherited = {n: _row_of(e, base_table.protocol.test_hooks)
                     for n, e in base_table.entries.items()}
    name = cls.__qualname__ + (f" (and {base.__qualname__}'s calls)" if base else "")
    init = table.constructor.request_text() if table.constructor is not None else ""
    yield (name, "(constructor)", "spawn", init or "(none)", "")
    for entry in table.entries.values():
        row = _row_of(entry, hooks)
        if inherited.get(entry.name) != row:
            yield (name, row[0], row[1], row[2] or "(none)", row[3])


def render() -> str:
    lines = ["| role | call | kind | request | reply |", "| --- | --- | --- | --- | --- |"]
    for cls in declared_roles():
        for role, call, kind, request, reply in table_rows(cls):
            lines.append(f"| {role} | `{call}` | {kind} | {_cell(request)} | {_cell(reply)} |")
    return "\n".join(lines)


def doc_table() -> str:
    text = DOC.read_text()
    start = text.index("| role | call | kind | request | reply |")
    end = text.find("\n\n", start)
    return text[start:end if end >= 0 else len(text)].strip()


def test_the_docs_protocol_table_is_the_declarations():
    doc_rows, declared = set(doc_table().splitlines()), set(render().splitlines())
    assert not declared - doc_rows and not doc_rows - declared, (
        "docs/architecture.md's Protocol table differs from the declarations: print the "
        "table with `python -m tests.unit.test_protocol_table` and paste it there\n"
        f"declared, not in the docs: {sorted(declared - doc_rows)}\n"
        f"in the docs, not declared: {sorted(doc_rows - declared)}")


def test_the_tables_are_pinned_to_the_wire_protocol_version():
    digest = hashlib.sha256(render().encode()).hexdigest()[:16]
    recorded = FINGERPRINTS.get(M.PROTOCOL_VERSION)
    assert recorded == digest, (
        f"the role tables (digest {digest}) are not those of wire protocol version "
        f"{M.PROTOCOL_VERSION} ({recorded}): a peer of the same version would not serve "
        "the same calls. Bump PROTOCOL_VERSION in rlmesh/wire/messages.py and record "
        f"{{{M.PROTOCOL_VERSION + 1}: {digest!r}}} in FINGERPRINTS")


# --- every remote call made in rlmesh/ ---

Scope = tuple[ast.AST, ...]  # the enclosing functions, innermost last


def _functions(tree: ast.AST) -> Iterator[tuple[Scope, ast.Call]]:
    """(enclosing functions, call) for every call in ``tree``."""
    def walk(node: ast.AST, scope: Scope) -> Iterator[tuple[Scope, ast.Call]]:
        for child in ast.iter_child_nodes(node):
            inner = scope + (child,) if isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef)) else scope
            if isinstance(child, ast.Call):
                yield scope, child
            yield from walk(child, inner)
    yield from walk(tree, ())


def _loop_over(scope: Scope, name: str) -> tuple[ast.AST, str] | None:
    """(function, its parameter) whose items ``name`` is the first of: ``for name, ... in
    param`` in the innermost function, the parameter being its own or an enclosing one's."""
    for node in ast.walk(scope[-1]):
        if isinstance(node, ast.For) and isinstance(node.target, ast.Tuple) \
                and isinstance(node.target.elts[0], ast.Name) \
                and node.target.elts[0].id == name and isinstance(node.iter, ast.Name):
            for fn in reversed(scope):
                if node.iter.id in _params(fn):
                    return fn, node.iter.id
    return None


def _assigned(scope: Scope, name: str) -> ast.expr | None:
    """The value last assigned to ``name`` in the innermost function (``calls = [...]``)."""
    value = None
    for node in ast.walk(scope[-1]) if scope else ():
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets):
            value = node.value
    return value


def _params(fn: ast.AST) -> list[str]:
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return []
    names = [a.arg for a in fn.args.posonlyargs + fn.args.args]
    return names[1:] if names[:1] in (["self"], ["cls"]) else names


def _callee(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _site(call: ast.Call) -> tuple[str, ast.expr] | None:
    """(kind, the expression naming the call) of a remote call site, or None."""
    f = call.func
    if isinstance(f, ast.Attribute) and f.attr in _SITES and call.args:
        if not any(n in ast.unparse(f.value) for n in NOT_HANDLES):
            return _SITES[f.attr], call.args[0]
    if _callee(call) == "make" and call.args and isinstance(call.args[0], ast.Attribute) \
            and call.args[0].attr in ("CALL", "TELL", "STREAM"):
        named = {k.arg: k.value for k in call.keywords}
        if "m" in named:
            return call.args[0].attr.lower(), named["m"]
    return None


def remote_calls() -> tuple[list[tuple[str, str, str]], list[str]]:
    """([(call name, kind, where)], [sites whose name is not a literal a test can check])."""
    trees = {p: ast.parse(p.read_text()) for p in sorted(PACKAGE.rglob("*.py"))}
    found: list[tuple[str, str, str]] = []
    unresolved: list[str] = []
    # Functions that pass a call name on: name -> (param index, param, kind, a sequence of
    # (name, args, kwargs) tuples rather than a name, the file it is defined in).
    forwarders: dict[str, tuple[int, str, str, bool, pathlib.Path]] = {}

    def forward(fn: ast.AST, param: str, kind: str, seq: bool, file: pathlib.Path) -> None:
        forwarders.setdefault(fn.name, (_params(fn).index(param), param, kind, seq, file))  # type: ignore[attr-defined]

    def named(expr: ast.expr, kind: str, scope: Scope, file: pathlib.Path, line: int,
              seq: bool = False) -> None:
        where = f"{file.relative_to(ROOT)}:{line}"
        if seq and isinstance(expr, (ast.List, ast.Tuple)):
            for item in expr.elts:
                if isinstance(item, ast.Tuple) and item.elts:
                    named(item.elts[0], kind, scope, file, line)
                elif isinstance(item, ast.Starred) and isinstance(item.value, ast.Name) \
                        and (value := _assigned(scope, item.value.id)) is not None:
                    named(value, kind, scope, file, line, seq)  # [*calls, ...]
                else:
                    unresolved.append(f"{where}: {ast.unparse(item)}")
        elif seq and isinstance(expr, ast.IfExp):
            named(expr.body, kind, scope, file, line, seq)
            named(expr.orelse, kind, scope, file, line, seq)
        elif not seq and isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            found.append((expr.value, kind, where))
        elif not seq and isinstance(expr, ast.IfExp):
            named(expr.body, kind, scope, file, line)
            named(expr.orelse, kind, scope, file, line)
        elif isinstance(expr, ast.Name) and any(expr.id in _params(f) for f in scope):
            fn = next(f for f in reversed(scope) if expr.id in _params(f))
            forward(fn, expr.id, kind, seq, file)
        elif isinstance(expr, ast.Name) and scope and not seq \
                and (loop := _loop_over(scope, expr.id)) is not None:
            forward(loop[0], loop[1], kind, True, file)
        elif USER_NAMED.get(str(file.relative_to(ROOT))) == ast.unparse(expr):
            pass
        else:
            unresolved.append(f"{where}: {ast.unparse(expr)}")

    for file, tree in trees.items():
        if str(file.relative_to(ROOT)).startswith(MACHINERY):
            continue
        for scope, call in _functions(tree):
            site = _site(call)
            if site is not None:
                named(site[1], site[0], scope, file, call.lineno)
    # A method name defined more than once in rlmesh/ (start, _call) may be another class's
    # method elsewhere: there, what its argument names is checked, but an argument that
    # names nothing checkable is not taken for an unchecked call.
    defined: dict[str, int] = {}
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                defined[node.name] = defined.get(node.name, 0) + 1
    done: set[str] = set()
    while set(forwarders) - done:  # calls of functions that pass a call name on
        for name in sorted(set(forwarders) - done):
            done.add(name)
            index, param, kind, seq, home = forwarders[name]
            for file, tree in trees.items():
                for scope, call in _functions(tree):
                    # A plain-name call reaches a function of its own file only.
                    if _callee(call) != name or file != home and isinstance(call.func, ast.Name):
                        continue
                    loose = file != home and defined.get(name, 0) > 1
                    if isinstance(call.func, ast.Attribute) and any(
                            n in ast.unparse(call.func.value) for n in NOT_HANDLES):
                        continue
                    args = {k.arg: k.value for k in call.keywords}
                    expr = call.args[index] if index < len(call.args) else args.get(param)
                    if expr is not None and not isinstance(expr, ast.Starred):
                        before = len(unresolved)
                        named(expr, kind, scope, file, call.lineno, seq)
                        if loose:
                            del unresolved[before:]
    return found, unresolved


def test_every_remote_call_in_rlmesh_is_declared_by_a_role_as_its_kind():
    served: dict[str, set[str]] = {}
    for cls in declared_roles():
        for name, entry in table_of(cls, hooks=True).entries.items():
            served.setdefault(name, set()).update(entry.kinds)
    found, unresolved = remote_calls()
    assert len(found) > 40  # the walk sees the driver's, the roles' and the client's calls
    undeclared = [f"{where}: {kind} {name!r}" for name, kind, where in found
                  if kind not in served.get(name, ())]
    assert not undeclared, "remote calls no role declares (as that kind):\n" + "\n".join(undeclared)
    assert not unresolved, ("remote calls named by an expression the table cannot be checked "
                            "against (name them with a literal):\n" + "\n".join(unresolved))


if __name__ == "__main__":
    print(render())
    print(f"\nfingerprint: {hashlib.sha256(render().encode()).hexdigest()[:16]}")
