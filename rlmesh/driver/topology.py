"""A run's processes as data: which roles (class, count, where, restart policy, spec), who
streams what to whom and who publishes weights to whom. ``topologies.py`` declares one per
algorithm family; ``mesh.py`` builds and supervises any declaration; ``render`` draws one."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

# Where a role's actors run: "process" (one process each), "driver" (one actor in the driver
# process), "driver_if_none" (one in the driver, index 0, when the count is 0: RLlib's local
# env runner), or a function of the mesh naming one of these.
PLACEMENTS = ("process", "driver", "driver_if_none")
# The restart policies a role may name (driver/runner_faults.py ``restart_policy``).
RESTARTS = ("never", "runner", "helper", "shard", "inference")
# How a stream's sources spread over its sinks: source i to sink i mod n ("mod"), every
# source to every sink in turn ("all"), each source to a sink on its own node, in turn among
# them, or by "mod" where its node has none ("node": tree aggregation, the mesh's node map).
FANS = ("mod", "all", "node")
STREAM_WINDOW = 2  # a stream's window where neither it nor the config sets one


@dataclass(frozen=True)
class Role:
    """One kind of actor; each callable takes the mesh (``mesh.config``: the run's config).
    ``count``: how many; ``spec(mesh, index)``: its constructor
    arguments (a spec's ``to_data``); ``name``: the actor name's stem (``<name>-<index>``, or
    ``name`` alone for a single named actor with ``single=True``). ``phase``: when the mesh
    builds it (``Mesh.build``); ``when``: whether this run has it at all."""

    kind: str
    cls_path: str
    count: Callable[[Any], int]
    spec: Callable[[Any, int], dict[str, Any]]
    placement: str | Callable[[Any], str] = "process"
    restart: str = "never"
    phase: str = "start"
    name: str = ""
    first_index: int = 0
    label: str = ""  # the process's role in logs and the run's folder
    single: bool = False
    when: Callable[[Any], bool] = lambda mesh: True
    env: Callable[[Any], dict[str, str]] | None = None  # extra environment, from the mesh
    ready_call: str | None = None  # called on each once built, before streams are connected
    # A coroutine ``after_build(mesh, handles)`` once all are built (data-parallel learners
    # meet; a shard in the driver is handed to the learner there).
    after_build: Callable[[Any, list[Any]], Awaitable[None]] | None = None
    # ``node(mesh, index)``: the node of a launched cluster actor ``index`` goes to (a
    # node's relay or aggregator goes where that node's runners are); None or "": where the
    # scheduler placed it.
    node: Callable[[Any, int], str | None] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.placement, str) and self.placement not in PLACEMENTS:
            raise ValueError(f"role {self.kind}: placement {self.placement!r} not in {PLACEMENTS}")
        if self.restart not in RESTARTS:
            raise ValueError(f"role {self.kind}: restart {self.restart!r} not in {RESTARTS}")

    def actor_name(self, index: int) -> str:
        return self.name or self.kind if self.single else f"{self.name or self.kind}-{index}"

    def places(self, mesh: Any) -> list[tuple[int, bool]]:
        """``(index, in the driver process)`` of each actor of this role in ``mesh``'s run."""
        placement = self.placement if isinstance(self.placement, str) else self.placement(mesh)
        n = self.count(mesh)
        if placement == "driver" or (placement == "driver_if_none" and n == 0):
            return [(0, True)]
        return [(self.first_index + i, False) for i in range(n)]


@dataclass(frozen=True)
class Stream:
    """``src`` actors send ``what`` to ``dst`` actors. ``via``: how it is opened: a call on
    each source naming its sinks (``"start_streaming"``: the mesh makes it, and again when a
    source restarts), a call on each sink naming every source (``"pull:<method>"``: the sink
    asks), or ``"spec"`` (the source's spec names its sinks). When a sink restarts, the
    sources feeding it are told ``reset_streams``; a pulling sink is told ``on_src_restart``
    with the source's index."""

    src: str
    dst: str
    what: str
    fan: str = "mod"
    via: str = "start_streaming"
    when: Callable[[Any], bool] = lambda mesh: True
    on_src_restart: str | None = None
    # Messages a source may have in flight to a sink (a call's window); None: the config's
    # max_sample_requests_in_flight_per_worker where it has one (IMPALA's, APEX's), else
    # STREAM_WINDOW.
    window: int | None = None

    def window_in(self, config: Any) -> int:
        if self.window is not None:
            return self.window
        return getattr(config, "max_sample_requests_in_flight_per_worker", STREAM_WINDOW)

    def __post_init__(self) -> None:
        if self.fan not in FANS:
            raise ValueError(f"stream {self.src}->{self.dst}: fan {self.fan!r} not in {FANS}")

    def sinks(self, index: int, sinks: list[str],
              same_node: tuple[int, list[str]] | None = None) -> list[str]:
        """The sink names source number ``index`` (its position) sends to. For fan "node",
        ``same_node`` is the source's position among its node's sources and its node's
        sinks (the mesh knows the nodes)."""
        if not sinks:
            return []
        if self.fan == "node" and same_node is not None and same_node[1]:
            position, local = same_node
            return [local[position % len(local)]]
        return list(sinks) if self.fan == "all" else [sinks[index % len(sinks)]]


@dataclass(frozen=True)
class Publish:
    """``src`` sends each new weights version to ``dst`` (the param server pushes on to its
    subscribers, which take it at their next fragment)."""

    src: str
    dst: str


@dataclass(frozen=True)
class Topology:
    """One algorithm family's processes and the data between them."""

    name: str
    roles: tuple[Role, ...]
    streams: tuple[Stream, ...] = ()
    publishes: tuple[Publish, ...] = ()

    def role(self, kind: str, cfg: Any = None) -> Role | None:
        """The declaration of ``kind`` (for ``cfg``: the one whose ``when`` holds)."""
        for role in self.roles:
            if role.kind == kind and (cfg is None or role.when(cfg)):
                return role
        return None

    def kinds(self) -> list[str]:
        return list(dict.fromkeys(r.kind for r in self.roles))

    def with_role(self, kind: str, **changes: Any) -> Topology:
        """This topology with every declaration of ``kind`` changed (an algorithm's own
        runner class, say)."""
        roles = tuple(dataclasses.replace(r, **changes) if r.kind == kind else r
                      for r in self.roles)
        return dataclasses.replace(self, roles=roles)

    def plus(self, *items: Role | Stream | Publish, name: str | None = None) -> Topology:
        """This topology with more roles, streams or publishes (a new role is one
        declaration: its class, count, spec, and the streams that reach it)."""
        return Topology(name or self.name,
                        self.roles + tuple(i for i in items if isinstance(i, Role)),
                        self.streams + tuple(i for i in items if isinstance(i, Stream)),
                        self.publishes + tuple(i for i in items if isinstance(i, Publish)))

    def receives_weights(self, kind: str) -> bool:
        """Whether ``kind`` subscribes to the param server's pushes (or a relay's, which
        stands in for it on a node)."""
        return any(p.src in ("param_server", "relay") and p.dst == kind for p in self.publishes)


def render(topology: Topology) -> str:
    """The topology as a mermaid flowchart: a node per role (its class and where it runs),
    an arrow per stream (what flows) and per publish (weights)."""
    lines = [f"%% {topology.name}", "flowchart LR"]
    for kind in topology.kinds():
        classes = " / ".join(dict.fromkeys(r.cls_path.rpartition(":")[2]
                                           for r in topology.roles if r.kind == kind))
        lines.append(f"    {kind}[\"{kind}: {classes}\"]")
    for s in topology.streams:
        lines.append(f"    {s.src} -->|{s.what}, {s.fan}| {s.dst}")
    for p in topology.publishes:
        lines.append(f"    {p.src} -.->|weights| {p.dst}")
    return "\n".join(lines)
