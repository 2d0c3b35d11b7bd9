"""PlacementError, and the words of it: which group, bundle and resource fall short, and by
how much, for a group that did not fit."""

from __future__ import annotations

from typing import Iterable

from rlmesh.placement.cluster import UNIT, Need, _Cluster, _fmt, _total
from rlmesh.runtime.resources import PlacementGroup


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
