"""Scheduler benchmarks: placing many bundles on a simulated cluster, no processes.

``place`` (sorted per-resource indexes, bisect to candidates) beside a plain scheduler
measured in the same run that makes the same choices by scanning every node for every
bundle; and ``replace`` after a node death beside placing everything again.
``python -m tests.benchmarks.bench_scheduler [--quick]`` prints the figures alone.
"""

from __future__ import annotations

import gc
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from rlmesh.placement.scheduler import Node, Placement, place, replace
from rlmesh.runtime.resources import Bundle, PlacementGroup

from .bench_runtime import Row


@dataclass(frozen=True)
class SchedulerSizes:
    """How big the simulated cluster and its requests are."""

    bundles: int  # bundles requested, in groups of 1-8
    nodes: int  # simulated nodes, one in four with GPUs
    rounds: int  # timed runs of each side, taking turns; the median is reported


DEFAULT = SchedulerSizes(bundles=10_000, nodes=1_000, rounds=5)
QUICK = SchedulerSizes(bundles=2_000, nodes=200, rounds=3)
LIMIT_MS = 1000.0  # the "well under a few seconds" for 10,000 bundles on 1,000 nodes

# (weight, resources): env runners, aggregators, learners, inference servers
SHAPES = [(60, {"CPU": 1, "memory": 2}), (20, {"CPU": 2, "memory": 8}),
          (10, {"CPU": 4, "GPU": 1, "memory": 32}), (5, {"CPU": 4, "GPU": 0.5, "memory": 32}),
          (5, {"CPU": 0.5, "GPU": 0.25, "memory": 4})]
STRATEGY_WEIGHTS = {"PACK": 40, "SPREAD": 30, "STRICT_PACK": 15, "STRICT_SPREAD": 15}


@dataclass
class SchedulerRow(Row):
    """A Row with an absolute goal too: rlmesh's figure at most ``limit`` (in ms)."""

    limit: float | None = None

    def goal_text(self) -> str:
        parts = []
        if self.goal is not None:
            parts.append(f"≤ {self.goal:g}x")
        if self.limit is not None:
            parts.append(f"≤ {self.limit:g} ms")
        return " and ".join(parts) + (f": {self.verdict}" if parts else "")

    @property
    def verdict(self) -> str:
        ok = (self.goal is None or self.ratio <= self.goal) and \
            (self.limit is None or self.rlmesh <= self.limit)
        return "met" if ok else "missed"


def workload(sizes: SchedulerSizes, seed: int = 0) -> tuple[list[PlacementGroup], list[Node]]:
    """A cluster about a third full once every group is placed (GPUs half), and its requests."""
    rng = random.Random(seed)
    gpu = {"CPU": 64, "GPU": 8, "memory": 512}
    cpu = {"CPU": 32, "memory": 128}
    nodes = [Node(f"node{i:04d}", gpu if i % 4 == 0 else cpu) for i in range(sizes.nodes)]
    weights = [w for w, _ in SHAPES]
    strategies, s_weights = list(STRATEGY_WEIGHTS), list(STRATEGY_WEIGHTS.values())
    groups: list[PlacementGroup] = []
    left = sizes.bundles
    while left:
        n = min(left, rng.randint(1, 8))
        shapes = rng.choices([s for _, s in SHAPES], weights, k=n)
        strategy = rng.choices(strategies, s_weights)[0]
        groups.append(PlacementGroup(tuple(Bundle(s) for s in shapes), strategy, f"g{len(groups)}"))
        left -= n
    return groups, nodes


def naive_place(groups: Sequence[PlacementGroup], nodes: Sequence[Node]) -> dict:
    """The reference: the same strategies and fit rules with no index. Every choice scans
    every node (best fit for PACK, worst fit for SPREAD, on the bundle's largest share)."""
    free = [dict(n.resources) for n in nodes]
    size = {r: sum(n.resources.get(r, 0) for n in nodes) or 1.0 for n in nodes for r in n.resources}
    eps = 1e-9

    def fits(i: int, need: Mapping[str, float]) -> bool:
        f = free[i]
        return all(f.get(r, 0.0) + eps >= v for r, v in need.items())

    def find(need: Mapping[str, float], best: bool, skip: Sequence[int] = ()) -> int | None:
        key_r = max(need, key=lambda r: need[r] / size.get(r, 1.0), default=None)
        chosen, chosen_key = None, 0.0
        for i in range(len(free)):
            if i in skip or not fits(i, need):
                continue
            key = free[i].get(key_r, 0.0) if key_r else 0.0
            if chosen is None or (key < chosen_key if best else key > chosen_key):
                chosen, chosen_key = i, key
        return chosen

    def take(i: int, need: Mapping[str, float]) -> None:
        for r, v in need.items():
            free[i][r] = free[i].get(r, 0.0) - v

    out = {}
    for g, group in enumerate(groups):
        needs = [dict(b.resources) for b in group.bundles]
        total: dict[str, float] = {}
        for need in needs:
            for r, v in need.items():
                total[r] = total.get(r, 0.0) + v
        at: list[int | None] = [None] * len(needs)
        if group.strategy in ("PACK", "STRICT_PACK"):
            i = find(total, True)
            if i is not None:
                at = [i] * len(needs)
                take(i, total)
            elif group.strategy == "STRICT_PACK":
                raise RuntimeError(f"naive: group {g} does not fit")
        for b, need in enumerate(needs):
            if at[b] is not None:
                continue
            used = [i for i in at if i is not None]
            if group.strategy == "PACK":
                i = next((j for j in used if fits(j, need)), None)
                i = find(need, False) if i is None else i
            else:
                i = find(need, False, used)
                if i is None and group.strategy == "SPREAD":
                    i = find(need, False)
            if i is None:
                raise RuntimeError(f"naive: group {g} bundle {b} does not fit")
            at[b] = i
            take(i, need)
        out.update(((g, b), nodes[i].name) for b, i in enumerate(at))
    return out


def _timed(fn: Callable[[], object]) -> tuple[float, object]:
    """CPU milliseconds of ``fn()``: single-threaded and without I/O, it equals the wall time
    on a quiet machine, and stays the scheduler's own cost on a busy one."""
    gc.collect()
    t0 = time.process_time()
    result = fn()
    return (time.process_time() - t0) * 1e3, result


def bench_place(sizes: SchedulerSizes, tmp: Path | None = None) -> list[Row]:
    groups, nodes = workload(sizes)
    ours, theirs = [], []
    for _ in range(sizes.rounds):  # take turns, so drift in machine load hits both
        ms, placement = _timed(lambda: place(groups, nodes))
        ours.append(ms)
        ms, naive = _timed(lambda: naive_place(groups, nodes))
        theirs.append(ms)
    assert isinstance(placement, Placement) and len(placement.assignment) == len(naive)
    bench = (f"scheduler, {sizes.bundles:,} bundles in {len(groups):,} groups on "
             f"{sizes.nodes:,} nodes")
    limit = LIMIT_MS * sizes.bundles / DEFAULT.bundles  # grows with the bundles, not the nodes
    return [SchedulerRow(bench, "CPU ms to place", statistics.median(ours),
                         statistics.median(theirs), "same strategies, every node scanned for "
                         "each bundle", goal=0.2, limit=round(limit))]


def bench_replace(sizes: SchedulerSizes, tmp: Path | None = None) -> list[Row]:
    groups, nodes = workload(sizes)
    placement = place(groups, nodes)
    # the node holding the most bundles dies
    counts: dict[str, int] = {}
    for name in placement.assignment.values():
        counts[name] = counts.get(name, 0) + 1
    dead = max(counts, key=lambda name: (counts[name], name))
    ours, theirs = [], []
    for _ in range(sizes.rounds):
        ms, after = _timed(lambda: replace(placement, dead, groups, nodes))
        ours.append(ms)
        alive = [n for n in nodes if n.name != dead]
        ms, _ = _timed(lambda: place(groups, alive))
        theirs.append(ms)
    assert isinstance(after, Placement) and dead not in after.assignment.values()
    return [SchedulerRow(f"scheduler, re-place the {counts[dead]} bundles of a dead node",
                         "CPU ms to re-place", statistics.median(ours), statistics.median(theirs),
                         "place() of every group again on the nodes left", goal=1.0)]


BENCHMARKS = {
    "scheduler_place": bench_place,
    "scheduler_replace": bench_replace,
}


if __name__ == "__main__":
    chosen = QUICK if "--quick" in sys.argv[1:] else DEFAULT
    for fn in BENCHMARKS.values():
        for row in fn(chosen):
            print(f"{row.bench}: {row.metric} {row.rlmesh:.1f} (reference {row.reference:.1f}: "
                  f"{row.peer}; {row.ratio:.3f}x; goal {row.goal_text()})")
