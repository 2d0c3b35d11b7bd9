"""One place advances a run's counters (issue 49): ``Algorithm._finish_iteration``, which the
synchronous loop, the asynchronous algorithms and APEX all end their iterations with."""

from __future__ import annotations

import ast
from pathlib import Path

from rlmesh.driver import algorithm
from rlmesh.driver.algorithm import Algorithm

ROOT = Path(__file__).resolve().parents[2] / "rlmesh"
COUNTERS = {"iteration", "timesteps_total", "num_env_steps_trained", "time_total_s"}


def counter_updates(tree: ast.AST) -> list[tuple[str, str]]:
    """``(function, counter)`` for every ``self.<counter> += ...`` / ``= ...`` in ``tree``."""
    out = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            targets = ([node.target] if isinstance(node, ast.AugAssign) else
                       node.targets if isinstance(node, ast.Assign) else [])
            for t in targets:
                if (isinstance(t, ast.Attribute) and t.attr in COUNTERS
                        and isinstance(t.value, ast.Name) and t.value.id == "self"):
                    out.append((fn.name, t.attr))
    return out


def test_only_finish_iteration_advances_the_counters():
    """Besides setting them up (``__init__``) and loading them (``restore``), no algorithm or
    driver module writes the run's counters but ``_finish_iteration``."""
    files = sorted((ROOT / "driver").glob("*.py")) + sorted((ROOT / "algorithms").glob("*.py"))
    writers = {(path.name, fn, counter)
               for path in files
               for fn, counter in counter_updates(ast.parse(path.read_text()))
               if fn not in ("__init__", "restore")}
    assert writers == {("algorithm.py", "_finish_iteration", c) for c in COUNTERS}, writers


def test_finish_iteration_counts_once_and_times_the_iteration(monkeypatch):
    made = []
    monkeypatch.setattr(algorithm, "iteration_result", lambda algo, *args: made.append(args) or {})
    algo = Algorithm.__new__(Algorithm)  # the counters alone: no process, no config
    algo.iteration = 3
    algo.timesteps_total, algo.num_env_steps_trained, algo.time_total_s = 100, 80, 5.0
    algo._finish_iteration(0.0, ["fragment"], 20, 10, {"p": {}}, sample_time=0.0, learn_time=0.0)
    algo._finish_iteration(0.0, [], 5, 0, {}, learn_time=2.5)
    assert (algo.iteration, algo.timesteps_total, algo.num_env_steps_trained) == (5, 125, 90)
    (fragments, steps, stats, elapsed, sample_time, learn_time), second = made
    assert (fragments, steps, stats) == (["fragment"], 20, {"p": {}})
    # No sample time measured: the iteration's length; a learn time of 0 stays 0.
    assert sample_time == elapsed > 0 and learn_time == 0.0
    assert second[4] == second[3] and second[5] == 2.5
    assert algo.time_total_s == 5.0 + elapsed + second[3]
