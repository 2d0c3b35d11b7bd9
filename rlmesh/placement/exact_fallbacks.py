"""The exact fallbacks of the scheduler, for a group its greedy pass could not place: a
matching of bundles to nodes (STRICT_SPREAD) and a bounded depth-first search (PACK, SPREAD)."""

from __future__ import annotations

from collections import deque
from typing import Collection

from rlmesh.placement.cluster import Need, _Cluster, _largest_first

SEARCH_BUDGET = 20_000  # fit checks a PACK/SPREAD group's fallback search may spend
SEARCH_MAX_BUNDLES = 200  # larger groups skip that search (its recursion is one level a bundle)


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
