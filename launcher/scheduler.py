"""Which node each bundle of resources goes to: placement groups on nodes, as Ray places them.

``place`` puts groups in order, each group all or nothing under its strategy; ``replace``
moves the bundles of dead nodes and leaves the rest where they are. Pure: no I/O, and the
same input gives the same output.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass
from types import MappingProxyType
from typing import Collection, Iterable, Mapping, Sequence

from rlmesh.runtime.resources import Bundle, PlacementGroup, check_resources

__all__ = ["Bundle", "Node", "Placement", "PlacementError", "PlacementGroup", "place", "replace"]

UNIT = 10_000  # amounts count in 1/10,000ths (Ray's granularity): sums are exact integers
# Bundles that ask none of these try nodes without them first, as Ray keeps CPU-only work off
# GPU nodes: a GPU node's CPUs are then still there for the learner that needs its GPU.
SCARCE = ("GPU",)
SEARCH_BUDGET = 20_000  # fit checks a PACK/SPREAD group's fallback search may spend
SEARCH_MAX_BUNDLES = 200  # larger groups skip that search (its recursion is one level a bundle)

Need = list[tuple[int, int]]  # (resource index, units) for each amount above zero


class PlacementError(RuntimeError):
    """A group that cannot be placed. The message names the group, the bundle, the resource
    that is short, how much was asked and the most any node has free."""

    # every field has a default, so the error pickles (BaseException rebuilds it from args)
    def __init__(self, message: str, *, group_index: int = -1, group_name: str = "",
                 bundle_index: int | None = None, bundle_label: str = "",
                 resource: str | None = None, needed: float | None = None,
                 most_free: float | None = None) -> None:
        super().__init__(message)
        self.group_index = group_index
        self.group_name = group_name
        self.bundle_index = bundle_index  # None: the group as a whole does not fit
        self.bundle_label = bundle_label
        self.resource = resource  # None: no single resource is short, only all of them at once
        self.needed = needed
        self.most_free = most_free


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

    def bundles_on(self, node: str) -> list[tuple[int, int]]:
        return [key for key, name in self.assignment.items() if name == node]


def place(groups: Sequence[PlacementGroup], nodes: Sequence[Node],
          used: Mapping[str, Mapping[str, float]] | None = None) -> Placement:
    """Place every group, in order, on ``nodes`` of which ``used`` is already taken.

    All or nothing: raises PlacementError on the first group that does not fit, and returns
    nothing of the others. ``used`` is only read.
    """
    groups = _check_groups(groups)
    cluster = _Cluster(nodes, used, _names_asked(groups))
    needs = [[cluster.need(b.resources) for b in group.bundles] for group in groups]
    assignment: dict[tuple[int, int], str] = {}
    for g, group in enumerate(groups):
        placed = _place_group(cluster, g, group, needs[g], list(range(len(group.bundles))), [])
        assignment.update(((g, b), cluster.names[placed[b]]) for b in range(len(group.bundles)))
    return cluster.placement(assignment)


def replace(placement: Placement, dead: str | Collection[str], groups: Sequence[PlacementGroup],
            nodes: Sequence[Node]) -> Placement:
    """``placement`` once the bundles of the ``dead`` node(s) are placed again on the others.

    Bundles on live nodes stay put. The moved ones go under their group's strategy with the
    group's bundles that stayed: near them for PACK, away from them for SPREAD. A STRICT_PACK
    group that lost a bundle is placed again as a whole. ``groups`` are the ones ``placement``
    was made for; ``nodes`` the cluster now (dead ones in it are ignored).
    """
    gone = {dead} if isinstance(dead, str) else set(dead)
    groups = _check_groups(groups)
    want = {(g, b) for g, group in enumerate(groups) for b in range(len(group.bundles))}
    if set(placement.assignment) != want:
        raise ValueError("replace: the placement was not made for these groups (its bundles "
                         f"are {len(placement.assignment)}, the groups have {len(want)})")
    baseline = {name: res for name, res in placement.baseline.items() if name not in gone}
    cluster = _Cluster([n for n in nodes if n.name not in gone], baseline, _names_asked(groups))
    needs = [[cluster.need(b.resources) for b in group.bundles] for group in groups]
    lost: dict[int, list[int]] = {}
    kept: dict[int, list[int]] = {}
    for (g, b), name in placement.assignment.items():
        if name in gone:
            lost.setdefault(g, []).append(b)
            continue
        i = cluster.at.get(name)
        if i is None:
            raise ValueError(f"replace: bundle {b} of group {g} is on node {name!r}, which is "
                             "neither among the nodes nor dead")
        if not cluster.fits(i, needs[g][b]):
            raise ValueError(f"replace: node {name!r} no longer has room for bundle {b} of "
                             f"group {g} that it holds")
        cluster.reserve(i, needs[g][b])
        kept.setdefault(g, []).append(b)
    cluster.reindex()
    assignment = dict(placement.assignment)
    context = f"after node{'s' if len(gone) > 1 else ''} {', '.join(sorted(gone))} died, "
    for g in sorted(lost):
        which, stay = lost[g], kept.get(g, [])
        if groups[g].strategy == "STRICT_PACK":  # cannot be split: the whole group moves
            for b in stay:
                cluster.give(cluster.at[assignment[(g, b)]], needs[g][b])
            which, stay = sorted(which + stay), []
        near = list(dict.fromkeys(cluster.at[assignment[(g, b)]] for b in stay))
        placed = _place_group(cluster, g, groups[g], needs[g], which, near, context)
        assignment.update(((g, b), cluster.names[i]) for b, i in placed.items())
    return cluster.placement(dict(sorted(assignment.items())))


def _check_groups(groups: Sequence[PlacementGroup]) -> list[PlacementGroup]:
    groups = list(groups)
    for g, group in enumerate(groups):
        if not isinstance(group, PlacementGroup):
            raise TypeError(f"group {g} is a {type(group).__name__}, not a PlacementGroup")
    return groups


def _names_asked(groups: Iterable[PlacementGroup]) -> set[str]:
    return {r for group in groups for b in group.bundles for r in b.resources}


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


# --- one group -------------------------------------------------------------------------------

def _place_group(cluster: _Cluster, g: int, group: PlacementGroup, needs: list[Need],
                 which: list[int], near: list[int], context: str = "") -> dict[int, int]:
    """Bundles ``which`` of group ``g`` -> node index, taken from ``cluster``; ``near`` holds
    the group's other bundles. Raises PlacementError, with nothing of the group taken."""
    strategy = group.strategy
    if strategy == "STRICT_PACK":
        placed = _strict_pack(cluster, needs, which)
    elif strategy == "PACK":
        placed = _pack(cluster, needs, which, near)
    else:
        placed = _spread(cluster, needs, which, near, strict=strategy == "STRICT_SPREAD")
    if isinstance(placed, dict):
        return placed
    raise _Explain(cluster, g, group, needs, which, near, context).error(placed)


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


def _strict_pack(cluster: _Cluster, needs: list[Need], which: list[int]) -> dict[int, int] | None:
    """All on the node that holds them with the least to spare."""
    total = _total(needs[b] for b in which)
    i = cluster.find(total, True)
    if i is None:
        return None
    cluster.take(i, total)
    return {b: i for b in which}


def _pack(cluster: _Cluster, needs: list[Need], which: list[int],
          near: list[int]) -> dict[int, int] | None:
    """All on one node if one has room (the group's own first); else the biggest bundles
    first, each on a node the group already uses, or all that is left on one more node, or
    on the roomiest node."""
    opened = list(near)
    left = dict(_total(needs[b] for b in which))  # resource -> units still to place
    placed: dict[int, int] = {}
    for b in _largest_first(cluster, needs, which):
        if b in placed:
            continue
        need, rest = needs[b], [(k, u) for k, u in left.items() if u]
        i = next((j for j in opened if cluster.fits(j, rest)), None)
        if i is None:
            i = next((j for j in opened if cluster.fits(j, need)), None)
        if i is None:
            i = cluster.find(rest, True)
        if i is None:
            i = cluster.find(need, False)
            if i is None:
                _undo(cluster, needs, placed)
                return _search(cluster, needs, which)
        if i not in opened:
            opened.append(i)
        todo = [r for r in which if r not in placed] if cluster.fits(i, rest) else [b]
        for r in todo:
            cluster.take(i, needs[r])
            placed[r] = i
            for k, u in needs[r]:
                left[k] -= u
    return placed


def _spread(cluster: _Cluster, needs: list[Need], which: list[int], near: list[int],
            strict: bool) -> dict[int, int] | int | None:
    """Biggest bundles first, each on the roomiest node the group does not use yet; SPREAD
    then reuses one, STRICT_SPREAD falls back on an exact matching of bundles to nodes."""
    taken = set(near)
    placed: dict[int, int] = {}
    for b in _largest_first(cluster, needs, which):
        i = cluster.find(needs[b], False, taken)
        if i is None:
            i = None if strict else cluster.find(needs[b], False)
            if i is None:
                _undo(cluster, needs, placed)
                return _match(cluster, needs, which, set(near)) if strict else \
                    _search(cluster, needs, which)
        cluster.take(i, needs[b])
        placed[b] = i
        taken.add(i)
    return placed


def _undo(cluster: _Cluster, needs: list[Need], placed: dict[int, int]) -> None:
    for b, i in placed.items():
        cluster.give(i, needs[b])
    placed.clear()


def _match(cluster: _Cluster, needs: list[Need], which: list[int],
           skip: Collection[int]) -> dict[int, int] | int:
    """Each bundle on a node of its own, found exactly (augmenting paths of a bipartite
    matching) where the greedy pass failed; else the index of a bundle left without one."""
    n = len(cluster.names)
    fit = {b: [i for i in range(n) if i not in skip and cluster.fits(i, needs[b])] for b in which}
    owner: dict[int, int] = {}  # node -> bundle
    held: dict[int, int] = {}  # bundle -> node
    for b in _largest_first(cluster, needs, which):
        reached: dict[int, int] = {}  # node -> the bundle whose search reached it
        queue = deque([b])
        end = None
        while queue and end is None:
            x = queue.popleft()
            for i in fit[x]:
                if i in reached:
                    continue
                reached[i] = x
                if i not in owner:
                    end = i
                    break
                queue.append(owner[i])
        if end is None:
            return b
        while end is not None:  # flip the path: each bundle on it moves to the node it reached
            x = reached[end]
            before = held.get(x)
            owner[end], held[x] = x, end
            end = before
    for b, i in held.items():
        cluster.take(i, needs[b])
    return dict(sorted(held.items()))


def _search(cluster: _Cluster, needs: list[Need], which: list[int]) -> dict[int, int] | None:
    """A depth-first search for any fit of the group, within SEARCH_BUDGET fit checks, where
    the greedy pass failed. Nodes with the same free resources are tried once."""
    if len(which) > SEARCH_MAX_BUNDLES:
        return None
    order = _largest_first(cluster, needs, which)
    by_free: dict[tuple[int, ...], list[int]] = {}
    for i, free in enumerate(cluster.free):
        by_free.setdefault(tuple(free), []).append(i)
    budget = [SEARCH_BUDGET]
    placed: dict[int, int] = {}

    def move(i: int, old: tuple[int, ...], new: tuple[int, ...]) -> None:
        by_free[old].remove(i)
        if not by_free[old]:
            del by_free[old]
        by_free.setdefault(new, []).append(i)

    def fill(pos: int) -> bool:
        if pos == len(order):
            return True
        need = needs[order[pos]]
        for vec in list(by_free):
            budget[0] -= 1
            if budget[0] < 0:
                return False
            if vec not in by_free or any(vec[k] < u for k, u in need):
                continue
            i, after = by_free[vec][-1], list(vec)
            for k, u in need:
                after[k] -= u
            move(i, vec, tuple(after))
            placed[order[pos]] = i
            if fill(pos + 1):
                return True
            move(i, tuple(after), vec)
        return False

    if not fill(0):
        return None
    for b, i in placed.items():
        cluster.take(i, needs[b])
    return dict(sorted(placed.items()))


class _Explain:
    """The PlacementError of a group that did not fit, in words a user can act on."""

    def __init__(self, cluster: _Cluster, g: int, group: PlacementGroup, needs: list[Need],
                 which: list[int], near: list[int], context: str) -> None:
        self.cluster, self.g, self.group, self.needs = cluster, g, group, needs
        self.which, self.near, self.context = which, near, context
        self.name = f"group {group.name!r}" if group.name else f"group {g}"

    def error(self, unmatched: int | None) -> PlacementError:
        cluster, needs = self.cluster, self.needs
        for b in self.which:  # a bundle that fits no node even alone says the most
            if cluster.find(needs[b], True) is None:
                return self._short(self._bundle(b), needs[b], b)
        strategy = self.group.strategy
        n = len(self.which)
        if strategy == "STRICT_PACK":
            return self._short(f"{self.name} (STRICT_PACK, {n} bundles on one node)",
                               _total(needs[b] for b in self.which), None, " together")
        total = _total(needs[b] for b in self.which)
        sums = [sum(f[k] for f in cluster.free) for k in range(len(cluster.resources))]
        over = [(k, u) for k, u in total if sums[k] < u]
        if over:
            k, u = over[0]
            r = cluster.resources[k]
            return self._error(f"{self.name} ({strategy}): its {n} bundles need {r} {_fmt(u)} "
                               f"in all, and {_fmt(sums[k])} is free on the whole cluster "
                               f"({self._nodes()})", None, r, u, sums[k])
        if strategy == "STRICT_SPREAD" and unmatched is not None:
            return self._unmatched(unmatched)
        return self._error(f"{self.name} ({strategy}): each of its {n} bundles fits alone, but "
                           f"no way was found to fit them all at once (they need "
                           f"{_amounts(cluster, total)} in all; {self._most(total)}; "
                           f"{self._nodes()})", None)

    def _unmatched(self, b: int) -> PlacementError:
        """STRICT_SPREAD: bundle b is left without a node of its own."""
        cluster, n = self.cluster, len(self.which)
        room = [i for i in range(len(cluster.names)) if i not in self.near
                and any(cluster.fits(i, self.needs[x]) for x in self.which)]
        if len(room) < n:
            return self._error(f"{self.name} (STRICT_SPREAD): its {n} bundles need a node each, "
                               f"and only {_count(len(room), 'node')} "
                               f"{'has' if len(room) == 1 else 'have'} room for any of them "
                               f"({_listed(cluster.names[i] for i in room) or 'none'}"
                               f"{'; the others hold the rest of the group' if self.near else ''})",
                               None)
        fit = [i for i in room if cluster.fits(i, self.needs[b])]
        where = "every node with room for it holds another bundle of the group" if not fit else \
            f"the only node with room for it ({cluster.names[fit[0]]}) is needed by another " \
            "bundle of the group" if len(fit) == 1 else \
            f"the {len(fit)} nodes with room for it ({_listed(cluster.names[i] for i in fit)}) " \
            "are all needed by other bundles of the group"
        return self._error(f"{self._bundle(b)}: needs {_amounts(cluster, self.needs[b])} on a "
                           f"node of its own (STRICT_SPREAD), and {where}", b)

    def _bundle(self, b: int) -> str:
        label = self.group.bundles[b].label
        return f"{self.name} bundle {b}" + (f" ({label})" if label else "")

    def _short(self, who: str, need: Need, b: int | None, where: str = "") -> PlacementError:
        cluster = self.cluster
        short = [(cluster.most_free(k), k, u) for k, u in need if cluster.most_free(k)[0] < u]
        if not short:
            return self._error(f"{who}: needs {_amounts(cluster, need)}{where or ' on one node'}, "
                               f"and no node has all of it free at once ({self._most(need)}; "
                               f"{self._nodes()})", b)
        (most, i), k, u = min(short, key=lambda s: s[0][0] / s[2])  # the shortest by ratio
        r = cluster.resources[k]
        on = f", on {cluster.names[i]}" if most > 0 else ""
        return self._error(f"{who}: needs {r} {_fmt(u)}{where}, the most free on any node is "
                           f"{_fmt(most)}{on} ({self._nodes()})", b, r, u, most)

    def _most(self, need: Need) -> str:
        parts = []
        for k, _ in need:
            most, i = self.cluster.most_free(k)
            on = f" on {self.cluster.names[i]}" if most > 0 else ""
            parts.append(f"{self.cluster.resources[k]} {_fmt(most)}{on}")
        return "most free: " + ", ".join(parts)

    def _nodes(self) -> str:
        return f"nodes: {_listed(self.cluster.names)}" if self.cluster.names else "no nodes"

    def _error(self, message: str, b: int | None, resource: str | None = None,
               needed: int | None = None, most: int | None = None) -> PlacementError:
        return PlacementError(
            self.context + message, group_index=self.g, group_name=self.group.name,
            bundle_index=b, bundle_label=self.group.bundles[b].label if b is not None else "",
            resource=resource, needed=None if needed is None else needed / UNIT,
            most_free=None if most is None else most / UNIT)


def _amounts(cluster: _Cluster, need: Need) -> str:
    return ", ".join(f"{cluster.resources[k]} {_fmt(u)}" for k, u in need) or "nothing"


def _listed(names: Iterable[str], limit: int = 6) -> str:
    names = list(names)
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
