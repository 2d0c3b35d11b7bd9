"""No pickle is read from a socket: the package's only unpickling is the spawn-channel loader
(rlmesh/runtime/handed.py), which reads only what the parent wrote on a child's stdin pipe,
and no code that reads a socket reaches it. A grep, so that a new ``pickle.loads`` anywhere
fails here before review."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOADER = "rlmesh/runtime/handed.py"
# Every unpickling there is: a pickle module of any name, torch.load without weights_only,
# numpy's allow_pickle.
UNPICKLING = re.compile(
    r"\b(import|from)\s+(c?pickle|cloudpickle|dill|_pickle|shelve|joblib)\b"
    r"|\b(c?pickle|cloudpickle|dill)\.(loads?|Unpickler)\b"
    r"|allow_pickle\s*=\s*True"
    r"|\btorch\.load\((?![^)]*weights_only\s*=\s*True)")
# Where bytes arrive from sockets: the wire, the actor runtime around it, the roles and the
# client/policy server, the launcher's agent links.
SOCKET_CODE = ["rlmesh/wire", "rlmesh/runtime/actor.py", "rlmesh/runtime/handle.py",
               "rlmesh/runtime/control.py", "rlmesh/runtime/job.py", "rlmesh/roles",
               "rlmesh/client", "rlmesh/launcher"]


def _sources() -> list[Path]:
    return sorted((ROOT / "rlmesh").rglob("*.py"))


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_the_spawn_channel_loader_is_the_only_unpickling():
    found = {f"{_rel(p)}:{n}: {line.strip()}"
             for p in _sources() if _rel(p) != LOADER
             for n, line in enumerate(p.read_text().splitlines(), 1) if UNPICKLING.search(line)}
    assert not found, "unpickling outside the spawn-channel loader:\n" + "\n".join(sorted(found))
    loader = (ROOT / LOADER).read_text()
    assert loader.count("cloudpickle.loads(") == 1  # in _unpickle: what receive() kept, or
    # what the listener read on stdin later (load() and _listen() are its only callers)
    assert loader.count("_unpickle(") == 3, "_unpickle has callers other than load and _listen"


def test_what_the_loader_unpickles_comes_from_stdin_only():
    """``handed.receive`` (the bytes _load unpickles) is called by the two entry points a
    parent starts with a pipe on stdin, with those bytes, and by nothing else; the later
    frames (``handed.listen``) are read from bootstrap's stdin alone."""
    callers = {}
    for p in _sources():
        for line in p.read_text().splitlines():
            if "handed.receive(" in line:
                callers.setdefault(_rel(p), []).append(line.strip())
    assert set(callers) == {"rlmesh/runtime/bootstrap.py", "rlmesh/tune/worker.py"}, callers
    for lines in callers.values():
        for line in lines:
            assert "stdin" in line or "parts[2]" in line, line
    bootstrap = (ROOT / "rlmesh/runtime/bootstrap.py").read_text()
    assert "stdin.readline()" in bootstrap  # the warm interpreter's spec and log paths
    listeners = {f"{_rel(p)}: {line.strip()}" for p in _sources()
                 for line in p.read_text().splitlines() if "handed.listen(" in line}
    assert listeners == {"rlmesh/runtime/bootstrap.py: handed.listen(sys.stdin.buffer.raw)  "
                         "# objects the parent makes later (foreach_worker's)"}, listeners


def test_code_that_reads_sockets_never_reaches_the_loader():
    for entry in SOCKET_CODE:
        path = ROOT / entry
        assert path.exists(), f"{entry} is gone: name where socket code lives now"
        for p in ([path] if path.is_file() else sorted(path.rglob("*.py"))):
            text = p.read_text()
            assert not re.search(r"\bhanded\.|import handed|handed import", text), _rel(p)
