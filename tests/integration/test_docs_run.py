"""Docs that run: every code block of README.md and docs/*.md marked runnable (the line
before its fence is ``<!-- runnable -->``, rule in docs/index.md) runs in a subprocess of its
own, so a renamed setting, method or CLI flag fails here and not in a reader's hands."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MARKER = "<!-- runnable -->"
# A block gets this long; marked blocks finish in seconds here (the rule asks for small
# budgets), so this only turns a hang into a failure with the block's output.
BLOCK_TIMEOUT_S = 100
_FENCE = re.compile(r"^(```+)\s*([\w+-]*)")
_LANGS = {"python": "python", "py": "python", "bash": "bash", "sh": "bash", "shell": "bash"}


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str  # "python" or "bash"
    code: str

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def runnable_blocks(path: Path) -> list[Block]:
    """The blocks of one markdown file whose fence follows the marker line."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith(fence.group(1))),
                   len(lines))
        if i > 0 and lines[i - 1].strip() == MARKER:
            lang = _LANGS.get(fence.group(2).lower())
            if lang is None:
                raise ValueError(f"{path}:{i + 1}: a runnable block must be python or bash/sh, "
                                 f"not {fence.group(2)!r}")
            blocks.append(Block(path, i + 1, lang, "\n".join(lines[i + 1:end]) + "\n"))
        i = end + 1
    return blocks


def all_blocks() -> list[Block]:
    files = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    return [b for f in files for b in runnable_blocks(f)]


def run_block(block: Block, tmp_path: Path) -> subprocess.CompletedProcess:
    venv_bin = str(Path(sys.executable).parent)
    env = {**os.environ, "HOME": str(tmp_path), "RLMESH_DOCS_TEST": "1",
           "PATH": venv_bin + os.pathsep + os.environ.get("PATH", ""),
           # the examples are imported as examples.*, from the repository root
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    if block.lang == "python":
        script = tmp_path / "block.py"
        script.write_text(block.code)
        cmd = [sys.executable, str(script)]
    else:
        cmd = ["bash", "-e", "-c", block.code]
    # A session of its own: a bash block's rlmesh is a grandchild, and a block that runs past
    # its time goes with its whole group (killing bash alone left the rlmesh it started).
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=BLOCK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


BLOCKS = all_blocks()


def test_the_docs_have_runnable_blocks():
    # Losing every marker (a renamed marker, a broken parser) must not pass quietly.
    names = [b.name for b in BLOCKS]
    assert any(n.startswith("README.md:") for n in names), names
    assert any(n.startswith("docs/") for n in names), names
    assert {b.lang for b in BLOCKS} == {"python", "bash"}, names


def test_only_marked_blocks_are_taken(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("text\n```python\nunmarked()\n```\n\n" + MARKER + "\n```py\nmarked()\n```\n"
                    "```sh\nalso_unmarked\n```\n")
    blocks = runnable_blocks(page)
    assert [(b.line, b.lang, b.code) for b in blocks] == [(7, "python", "marked()\n")]


@pytest.mark.timeout(BLOCK_TIMEOUT_S + 20)
@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.name)
def test_block_runs(block, tmp_path):
    proc = run_block(block, tmp_path)
    assert proc.returncode == 0, (
        f"{block.name} ({block.lang}) exited {proc.returncode}\n--- block ---\n{block.code}"
        f"--- output (tail) ---\n{(proc.stdout + proc.stderr)[-4000:]}")
