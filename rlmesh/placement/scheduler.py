"""Which node each bundle of resources goes to: placement groups on nodes, as Ray places them.

``place`` puts groups in order, each group all or nothing under its strategy; ``replace``
moves the bundles of dead nodes and leaves the rest where they are. Pure: no I/O, and the
same input gives the same output.

This module keeps those two and the greedy strategies; Node, Placement and the free-unit
bookkeeping are in placement/cluster.py, the exact fallbacks in placement/exact_fallbacks.py,
PlacementError and its wording in placement/errors.py.
"""

from __future__ import annotations

from typing import Collection, Iterable, Mapping, Sequence

from rlmesh.placement.cluster import (Need, Node, Placement, _Cluster, _largest_first,
                                               _total)
from rlmesh.placement.errors import PlacementError, _Explain
from rlmesh.placement.exact_fallbacks import _match, _search
from rlmesh.runtime.resources import Bundle, PlacementGroup

__all__ = ["Bundle", "Node", "Placement", "PlacementError", "PlacementGroup", "place", "replace"]


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
