"""The node provider's interface (see providers/__init__.py for the providers): what a
cluster session asks of whatever gives it its nodes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from rlmesh.runtime.job import Job
    from rlmesh.runtime.process import ChildSpec
    from rlmesh.runtime.run_dir import RunDir

PROVIDERS = ("ssh", "slurm", "kubernetes", "torchrun")

# Makes the process object of node ``node``'s agent, for Job.spawn_child.
MakeAgent = Callable[["ChildSpec", "RunDir"], Any]


class ProviderError(RuntimeError):
    """The provider cannot give the job its nodes (outside an allocation, a tool missing):
    one line saying what and what to do."""


class Provider:
    """One way of getting nodes and agents on them. A session calls, in order:
    ``resolve()`` (the cluster file with its nodes and head filled in), ``prepare()``
    (before any agent: keys, files, setup), then on the run's loop ``begin(job)`` and
    ``make_agent(node)`` for each node, ``end()`` after the job's shutdown, ``close()``."""

    name = "?"
    start_timeout = 60.0  # s for an agent to serve once started (a join waits longer)

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster

    def resolve(self) -> Any:
        return self.cluster

    def keys(self) -> Any:
        """The cluster's CURVE keys where the provider hands them out (a pod's Secret);
        None: the head makes them."""
        return None

    def prepare(self, keys_dir: Any) -> None:
        """Before any agent starts (``keys_dir``: the CURVE keys' folder, or None)."""

    def attach(self, keys_dir: Any) -> None:
        """A sweep's trial joins nodes a launch prepared: use them as they are."""

    async def begin(self, job: "Job") -> None:
        """On the run's loop, before the agents are asked for: start what starts them."""

    def make_agent(self, job: "Job", node: str) -> MakeAgent:
        raise NotImplementedError

    async def end(self) -> None:
        """After the job's shutdown: anything the provider started for the agents."""

    def close(self) -> None:
        """Once the session is done."""

    def describe(self) -> str:
        """One line for the launch's start: where the nodes came from."""
        return f"{len(self.cluster.nodes)} nodes over {self.name}"
