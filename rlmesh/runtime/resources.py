"""Resource requests as plain data: bundles of resources, and groups of bundles placed together.

Code low in the stack says what it needs with these; the launcher's scheduler decides where.
``to_data``/``from_data`` turn them into plain dicts and lists, so a request can cross a socket.
"""

from __future__ import annotations

import difflib
import math
import numbers
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal, Mapping, Sequence, get_args

Strategy = Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"]
STRATEGIES: tuple[str, ...] = get_args(Strategy)


def check_resources(resources: Any, what: str) -> Mapping[str, float]:
    """``resources`` as a read-only ``{name: amount}`` of floats; a ValueError naming ``what``
    and the culprit if a name or an amount is bad."""
    if not isinstance(resources, Mapping):
        raise ValueError(f"{what}: resources must be a mapping of name to amount, "
                         f"got {type(resources).__name__}")
    checked: dict[str, float] = {}
    for name, amount in resources.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"{what}: a resource name must be a non-empty string, got {name!r}")
        # bool is an int to Python, but {"GPU": True} is a mistake, not a request for 1 GPU
        if isinstance(amount, bool) or not isinstance(amount, numbers.Real):
            raise ValueError(f"{what}: {name} must be a number, got {amount!r}")
        if not math.isfinite(amount) or amount < 0:
            raise ValueError(f"{what}: {name} must be a finite number >= 0, got {amount!r}")
        checked[name] = float(amount)
    return MappingProxyType(checked)


def _check_keys(data: Any, allowed: Sequence[str], required: Sequence[str], what: str) -> None:
    if not isinstance(data, Mapping):
        raise ValueError(f"{what}: expected a mapping, got {type(data).__name__}")
    for key in data:
        if key not in allowed:
            near = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ValueError(f"{what}: unknown key {key!r}{hint}; known: {', '.join(allowed)}")
    missing = [key for key in required if key not in data]
    if missing:
        raise ValueError(f"{what}: missing {', '.join(missing)}")


def _check_str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, got {value!r}")
    return value


@dataclass(frozen=True)
class Bundle:
    """Resources that must sit together on one node, e.g. ``Bundle({"CPU": 1, "GPU": 0.5})``.

    Amounts are >= 0 and may be fractional (two bundles of 0.5 GPU share one GPU). Any name
    is a resource: a node that offers ``{"ssd": 1}`` is the only kind a ``{"ssd": 1}`` fits.
    """

    resources: Mapping[str, float]
    label: str = ""  # what the bundle is for ("learner"), named in placement errors

    def __post_init__(self) -> None:
        _check_str(self.label, "a bundle's label")
        what = f"bundle {self.label!r}" if self.label else "bundle"
        object.__setattr__(self, "resources", check_resources(self.resources, what))

    def __hash__(self) -> int:  # resources is a read-only mapping, which does not hash itself
        return hash((frozenset(self.resources.items()), self.label))

    def to_data(self) -> dict[str, Any]:
        return {"resources": dict(self.resources), "label": self.label}

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Bundle:
        _check_keys(data, ("resources", "label"), ("resources",), "bundle")
        return cls(data["resources"], data.get("label", ""))


@dataclass(frozen=True)
class PlacementGroup:
    """Bundles reserved together, all or none, placed by ``strategy``.

    PACK: as few nodes as possible. SPREAD: distinct nodes where there are enough.
    STRICT_PACK: all on one node, or fail. STRICT_SPREAD: each on a node of its own, or fail.
    ``bundles`` may also be given as a list, and each bundle as a plain mapping of resources.
    """

    bundles: tuple[Bundle, ...]
    strategy: Strategy = "PACK"
    name: str = ""  # named in placement errors

    def __post_init__(self) -> None:
        _check_str(self.name, "a placement group's name")
        what = f"placement group {self.name!r}" if self.name else "placement group"
        bundles = self.bundles
        if isinstance(bundles, (str, bytes, Mapping)) or not isinstance(bundles, Sequence):
            raise ValueError(f"{what}: bundles must be a sequence of Bundle, got {bundles!r}")
        if not bundles:
            raise ValueError(f"{what}: needs at least one bundle")
        object.__setattr__(self, "bundles", tuple(_as_bundle(b, what) for b in bundles))
        if self.strategy not in STRATEGIES:
            near = difflib.get_close_matches(str(self.strategy).upper(), STRATEGIES, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ValueError(f"{what}: strategy {self.strategy!r} is not one of "
                             f"{', '.join(STRATEGIES)}{hint}")

    def to_data(self) -> dict[str, Any]:
        return {"bundles": [b.to_data() for b in self.bundles], "strategy": self.strategy,
                "name": self.name}

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> PlacementGroup:
        _check_keys(data, ("bundles", "strategy", "name"), ("bundles",), "placement group")
        bundles = data["bundles"]
        if not isinstance(bundles, (list, tuple)):
            raise ValueError(f"placement group: bundles must be a list, got {bundles!r}")
        return cls(tuple(Bundle.from_data(b) for b in bundles), data.get("strategy", "PACK"),
                   data.get("name", ""))


def _as_bundle(value: Any, what: str) -> Bundle:
    if isinstance(value, Bundle):
        return value
    if isinstance(value, Mapping):
        return Bundle(value)
    raise ValueError(f"{what}: each bundle must be a Bundle or a mapping of resources, "
                     f"got {value!r}")


def cpus_asked(groups: Sequence[PlacementGroup]) -> float:
    """The CPUs every bundle of ``groups`` asks for, together."""
    return sum(b.resources.get("CPU", 0.0) for g in groups for b in g.bundles)


def without_cpus(groups: Sequence[PlacementGroup]) -> list[PlacementGroup]:
    """``groups`` asking for no CPU: what must still fit (GPUs, custom resources) when a run
    goes on with fewer cores than it asks for."""
    return [PlacementGroup(tuple(Bundle({k: v for k, v in b.resources.items() if k != "CPU"},
                                        b.label) for b in g.bundles), g.strategy, g.name)
            for g in groups]


def oversubscribed_line(what: str, asked: float, have: float) -> str:
    """The one warning for a run that asks for more CPUs than the machine has and runs
    anyway, its processes sharing the cores (slower, not wrong)."""
    return (f"{what} asks for {asked:g} CPUs and this machine has {have:g}: it runs "
            f"oversubscribed, its processes sharing the cores (slower than on {asked:g}); "
            "ask for fewer (num_env_runners, evaluation_num_env_runners, "
            "num_cpus_per_env_runner) to fit")
