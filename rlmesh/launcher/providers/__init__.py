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
- ``torchrun`` (``providers/torchrun.py``): the nodes are the processes of a ``torchrun``
  launch, one per node; rank 0 is the head, the others' agents join it.

Whatever the provider, the head's Job supervises each agent the same way (heartbeats, a lost
node's actors placed again) and the scheduler places the job's actors on what it was given.
"""

from __future__ import annotations

from typing import Any

from rlmesh.launcher.providers.base import PROVIDERS, MakeAgent, Provider, ProviderError

__all__ = ["PROVIDERS", "MakeAgent", "Provider", "ProviderError", "provider_for"]


def provider_for(cluster: Any) -> Provider:
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
    if kind == "torchrun":
        from rlmesh.launcher.providers.torchrun import TorchrunProvider

        return TorchrunProvider(cluster)
    raise ProviderError(f"no provider {kind!r} (providers: {', '.join(PROVIDERS)})")
