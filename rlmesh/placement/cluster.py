"""The scheduler's view of a cluster: a Node and what it offers, the Placement returned, and
_Cluster, every node's free units kept sorted per resource while groups are placed."""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from types import MappingProxyType
from typing import Collection, Iterable, Mapping, Sequence

from rlmesh.runtime.resources import check_resources

UNIT = 10_000  # amounts count in 1/10,000ths (Ray's granularity): sums are exact integers
# Bundles that ask none of these try nodes without them first, as Ray keeps CPU-only work off
# GPU nodes: a GPU node's CPUs are then still there for the learner that needs its GPU.
SCARCE = ("GPU",)

Need = list[tuple[int, int]]  # (resource index, units) for each amount above zero


@dataclass(frozen=True)
class Node:
    """A machine and what it offers, e.g. ``Node("w1", {"CPU": 16, "GPU": 2, "ssd": 1})``.

    Labels are custom resources: ``{"node:head": 1}`` makes a bundle asking for ``node:head``
    land on this node.
    """

    name: str
    resources: Mapping[str, float]

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"a node's name must be a non-empty string, got {self.name!r}")
        resources = check_resources(self.resources, f"node {self.name!r}")
        object.__setattr__(self, "resources", resources)

    def __hash__(self) -> int:
        return hash((self.name, frozenset(self.resources.items())))


@dataclass(frozen=True)
class Placement:
    """Where each bundle went, and every node's resources once they are there."""

    assignment: Mapping[tuple[int, int], str]  # (group index, bundle index) -> node name
    used: Mapping[str, Mapping[str, float]]  # node -> resource -> in use, ``baseline`` included
    free: Mapping[str, Mapping[str, float]]  # node -> resource -> left
    baseline: Mapping[str, Mapping[str, float]]  # in use before: the ``used`` given to place

    def __getitem__(self, key: tuple[int, int]) -> str:
        return self.assignment[key]

    def group(self, index: int) -> tuple[str, ...]:
        """The nodes of a group's bundles, in bundle order."""
        nodes = []
        while (index, len(nodes)) in self.assignment:
            nodes.append(self.assignment[(index, len(nodes))])
        return tuple(nodes)


def _units(amount: float) -> int:
    return round(amount * UNIT)


def _fmt(units: int) -> str:
    return f"{units / UNIT:g}"


class _Cluster:
    """Free units of every node, and per resource the nodes sorted by what they have free,
    so best fit and worst fit bisect to their candidates instead of scanning every node."""

    def __init__(self, nodes: Sequence[Node], used: Mapping[str, Mapping[str, float]] | None,
                 asked: Iterable[str]) -> None:
        self.nodes = list(nodes)
        self.names = [n.name for n in self.nodes]
        self.at = {name: i for i, name in enumerate(self.names)}
        if len(self.at) != len(self.names):
            twice = sorted({n for n in self.names if self.names.count(n) > 1})
            raise ValueError(f"node names must be unique: {', '.join(twice)} given twice")
        self.resources = sorted({r for n in self.nodes for r in n.resources} | set(asked))
        self.rix = {r: k for k, r in enumerate(self.resources)}
        self.cap = [[_units(n.resources.get(r, 0.0)) for r in self.resources] for n in self.nodes]
        self.free = [list(c) for c in self.cap]
        self.baseline = self._take_used(used or {})
        self.scarce = {self.rix[r] for r in SCARCE if r in self.rix}
        self.pool = [int(any(c[k] > 0 for k in self.scarce)) for c in self.cap]
        self.size = [sum(c[k] for c in self.cap) or 1 for k in range(len(self.resources))]
        self.members = tuple([i for i, p in enumerate(self.pool) if p == q] for q in (0, 1))
        self.reindex()

    def reindex(self) -> None:
        """Sort the indexes again (after ``reserve``: cheaper than many ``take``)."""
        self.index = [[sorted((self.free[i][k], i) for i in members)
                       for k in range(len(self.resources))] for members in self.members]

    def _take_used(self, used: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
        baseline: dict[str, dict[str, float]] = {}
        for name, amounts in used.items():
            if name not in self.at:
                raise ValueError(f"used names node {name!r}, which is not among the nodes")
            amounts = check_resources(amounts, f"used on node {name!r}")
            i = self.at[name]
            for r, amount in amounts.items():
                k = self.rix.get(r)
                if amount == 0:
                    continue
                if k is None or self.free[i][k] < _units(amount):
                    have = self.nodes[i].resources.get(r, 0.0)
                    raise ValueError(f"used on node {name!r}: {r} {amount:g} is more than the "
                                     f"{have:g} it has")
                self.free[i][k] -= _units(amount)
            baseline[name] = dict(amounts)
        return baseline

    def need(self, resources: Mapping[str, float]) -> Need:
        # a positive amount never rounds to nothing: it would be free
        return [(self.rix[r], max(1, _units(v))) for r, v in resources.items() if v > 0]

    def fits(self, i: int, need: Need) -> bool:
        free = self.free[i]
        return all(free[k] >= u for k, u in need)

    def reserve(self, i: int, need: Need) -> None:
        """Take without keeping the indexes sorted; call ``reindex`` after."""
        free = self.free[i]
        for k, u in need:
            free[k] -= u

    def take(self, i: int, need: Need, sign: int = -1) -> None:
        index, free = self.index[self.pool[i]], self.free[i]
        for k, u in need:
            sorted_k = index[k]
            del sorted_k[bisect.bisect_left(sorted_k, (free[k], i))]
            free[k] += sign * u
            bisect.insort(sorted_k, (free[k], i))

    def give(self, i: int, need: Need) -> None:
        self.take(i, need, sign=1)

    def find(self, need: Need, best: bool, skip: Collection[int] = ()) -> int | None:
        """The node with the least (best) or most (not best) free of the need's scarcest
        resource that fits it all, outside ``skip``; nodes without SCARCE first if it asks none."""
        asks_scarce = any(k in self.scarce for k, _ in need)
        for pool in (1,) if asks_scarce else (0, 1):
            found = self._find_in(pool, need, best, skip)
            if found is not None:
                return found
        return None

    def _find_in(self, pool: int, need: Need, best: bool, skip: Collection[int]) -> int | None:
        if not need:
            return next((i for i in self.members[pool] if i not in skip), None)
        index = self.index[pool]
        # scan along the resource the fewest nodes have enough of: the shortest candidate run
        scan, start, count = 0, 0, -1
        for k, u in need:
            lo = bisect.bisect_left(index[k], (u, -1))
            if count < 0 or len(index[k]) - lo < count:
                scan, start, count = k, lo, len(index[k]) - lo
        if count == 0:
            return None
        sorted_k, free = index[scan], self.free
        order = range(start, len(sorted_k)) if best else range(len(sorted_k) - 1, start - 1, -1)
        for pos in order:
            i = sorted_k[pos][1]
            if i not in skip and all(free[i][k] >= u for k, u in need):
                return i
        return None

    def most_free(self, k: int) -> tuple[int, int]:
        """(units, node index) of the most free of resource k on any node; node -1 if none."""
        return max((index[k][-1] for index in self.index if index[k]), default=(0, -1))

    def placement(self, assignment: dict[tuple[int, int], str]) -> Placement:
        used, free = {}, {}
        for i, node in enumerate(self.nodes):
            ks = [(r, self.rix[r]) for r in node.resources]
            used[node.name] = MappingProxyType(
                {r: (self.cap[i][k] - self.free[i][k]) / UNIT for r, k in ks})
            free[node.name] = MappingProxyType({r: self.free[i][k] / UNIT for r, k in ks})
        baseline = {n: MappingProxyType(dict(r)) for n, r in self.baseline.items()}
        return Placement(MappingProxyType(assignment), MappingProxyType(used),
                         MappingProxyType(free), MappingProxyType(baseline))


def _total(needs: Iterable[Need]) -> Need:
    total: dict[int, int] = {}
    for need in needs:
        for k, u in need:
            total[k] = total.get(k, 0) + u
    return sorted(total.items())


def _largest_first(cluster: _Cluster, needs: list[Need], which: list[int]) -> list[int]:
    """Bundles by decreasing share of the cluster they ask (first fit decreasing packs best)."""
    size = cluster.size
    return sorted(which, key=lambda b: (-sum(u / size[k] for k, u in needs[b]), b))
