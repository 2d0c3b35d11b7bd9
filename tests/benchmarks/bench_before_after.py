"""A change measured against the code before it, in one run: each benchmark of
``tests.benchmarks.run`` runs in the other checkout and in this one, in turns, each beside
its own reference (raw sampler, SB3, RLlib, bare torch import) measured in the same turn.

``python -m tests.benchmarks.bench_before_after --before REV [--quick] [--only a,b]``
REV is a git revision (checked out with ``git worktree add`` under /tmp) or the path of a
checkout. Each side is a ``python -m tests.benchmarks.run --only NAME --json F`` in its own
tree (``PYTHONPATH`` and the working directory point there, so every process it starts,
the env runners included, imports that tree's rlmesh). Printed: each row's figure before and
after, and after/before. Measured, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# The redesign's must-not-regress list (issue 33): PPO to 475 against SB3, sampling against
# a raw process and RLlib, IMPALA throughput against the raw loop, APEX throughput,
# start-up, memory.
DEFAULT_ONLY = "ppo_sampling,ppo_memory,ppo_learning,impala_throughput,apex_throughput,startup"


def checkout(before: str) -> Path:
    """The tree to compare with: a path as it is, or a revision in a worktree of its own."""
    path = Path(before)
    if path.is_dir():
        tree = path.resolve()
    else:
        rev = subprocess.run(["git", "rev-parse", "--short", before], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout.strip()
        tree = Path(tempfile.gettempdir()) / f"rlmesh-before-{rev}"
        if not tree.exists():
            subprocess.run(["git", "worktree", "add", "--detach", str(tree), rev], cwd=ROOT,
                           check=True, capture_output=True)
    # Before the launcher moved into rlmesh/ it installed as rlmesh.launcher through
    # package-dir; a tree run from source finds it only through this link.
    if (tree / "launcher").is_dir() and not (tree / "rlmesh" / "launcher").exists():
        (tree / "rlmesh" / "launcher").symlink_to(tree / "launcher")
    return tree


def run_side(tree: Path, name: str, quick: bool, out: Path) -> list[dict[str, Any]]:
    """One benchmark in ``tree``; its rows (empty when it failed, with the reason printed)."""
    cmd = [sys.executable, "-m", "tests.benchmarks.run", "--only", name, "--json", str(out)]
    if quick:
        cmd.append("--quick")
    env = {**os.environ, "PYTHONPATH": str(tree)}
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    took = time.perf_counter() - start
    if proc.returncode != 0 and out.exists():  # run.py says 1 for processes left behind
        print(f"  {name} in {tree}: exit {proc.returncode}: {proc.stdout.strip().splitlines()[-1:]}")
    if not out.exists():
        tail = "\n    ".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
        print(f"  {name} in {tree}: failed (exit {proc.returncode}) after {took:.0f} s\n    {tail}")
        return []
    print(f"  {name} in {tree}: {took:.0f} s", flush=True)
    return json.loads(out.read_text())["rows"]


def table(pairs: list[tuple[dict[str, Any] | None, dict[str, Any] | None]]) -> str:
    lines = ["| benchmark | metric | before | after | after/before | reference before | "
             "reference after | reference is |", "|---|---|---:|---:|---:|---:|---:|---|"]
    for before, after in pairs:
        row = after or before
        b = before["rlmesh"] if before else float("nan")
        a = after["rlmesh"] if after else float("nan")
        ratio = f"{a / b:.2f}x" if b == b and a == a and b else "–"
        refs = [f"{r['reference']:.4g}" if r and r["reference"] == r["reference"] else "–"
                for r in (before, after)]
        lines.append(f"| {row['bench']} | {row['metric']} | {b:.4g} | {a:.4g} | {ratio} | "
                     f"{refs[0]} | {refs[1]} | {row['peer']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.bench_before_after",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--before", required=True, help="a git revision or a checkout's path")
    parser.add_argument("--only", default=DEFAULT_ONLY,
                        help=f"comma-separated benchmark names (default {DEFAULT_ONLY})")
    parser.add_argument("--quick", action="store_true", help="each suite's --quick sizes")
    parser.add_argument("--json", metavar="FILE", help="also write both sides' rows here")
    args = parser.parse_args(argv)
    before = checkout(args.before)
    print(f"before: {before}\nafter:  {ROOT}\nload average: {os.getloadavg()}", flush=True)
    pairs: list[tuple[dict[str, Any] | None, dict[str, Any] | None]] = []
    sides: dict[str, dict[str, list[dict[str, Any]]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in [n.strip() for n in args.only.split(",") if n.strip()]:
            got = {side: run_side(tree, name, args.quick, Path(tmp) / f"{side}-{name}.json")
                   for side, tree in (("before", before), ("after", ROOT))}
            sides[name] = got
            keyed = {side: {(r["bench"], r["metric"], r["peer"]): r for r in rows}
                     for side, rows in got.items()}
            for key in dict.fromkeys([*keyed["before"], *keyed["after"]]):
                pairs.append((keyed["before"].get(key), keyed["after"].get(key)))
    print(table(pairs))
    print(f"load average after: {os.getloadavg()}")
    if args.json:
        Path(args.json).write_text(json.dumps(sides, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
