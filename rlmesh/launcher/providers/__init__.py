"""Node providers: how ``rlmesh launch`` finds a cluster's nodes, starts an agent on each,
what ties the agents' lives to the head's, and how they stop. The cluster file's
``provider`` picks one:

- ``ssh`` (``providers/ssh.py``): the file lists the nodes; the head SSHes to each, syncs
  files, runs the setup and starts the agent; the ssh session is the agent's lifeline.
- ``slurm`` (``providers/slurm.py``): the nodes are the Slurm allocation the launch runs in;
  one ``srun`` step starts every agent, which joins the head (``launcher/join.py``); the step
  is their lifeline (the job's end or ``scancel`` takes them all).
- ``kubernetes`` (``providers/kubernetes.py``): the nodes are the pods of an Indexed Job the
  launch rendered; each pod's ``rlmesh node --from-env`` starts its agent, which joins the
  head on pod 0.

Whatever the provider, the head's Job supervises each agent the same way (heartbeats, a lost
node's actors placed again) and the scheduler places the job's actors on what it was given.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from rlmesh.launcher.cluster_config import ClusterConfig
    from rlmesh.runtime.job import Job
    from rlmesh.runtime.process import ChildSpec
    from rlmesh.runtime.run_dir import RunDir

PROVIDERS = ("ssh", "slurm", "kubernetes")

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

    def __init__(self, cluster: "ClusterConfig") -> None:
        self.cluster = cluster

    def resolve(self) -> "ClusterConfig":
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


def provider_for(cluster: "ClusterConfig") -> Provider:
    """The provider the cluster file asks for."""
    kind = getattr(cluster, "provider", "ssh")
    if kind == "ssh":
        from rlmesh.launcher.providers.ssh import SSHProvider

        return SSHProvider(cluster)
    if kind == "slurm":
        from rlmesh.launcher.providers.slurm import SlurmProvider

        return SlurmProvider(cluster)
    if kind == "kubernetes":
        from rlmesh.launcher.providers.k8s_head import KubernetesProvider

        return KubernetesProvider(cluster)
    raise ProviderError(f"no provider {kind!r} (providers: {', '.join(PROVIDERS)})")
