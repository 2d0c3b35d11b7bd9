"""The ``kubernetes`` provider's head side, and the pod's bootstrap.

``rlmesh launch --render k8s`` (providers/kubernetes.py) writes an Indexed Job whose pods each
run ``rlmesh node --from-env``. ``pod_plan`` reads what Kubernetes and the manifests give the
pod: its index (``JOB_COMPLETION_INDEX``), the cluster file (a ConfigMap), the head's DNS name
(pod 0 behind the headless Service), the join port and the CURVE keys (a Secret). Pod 0 runs
``rlmesh launch`` of the file: the head, whose ``KubernetesProvider`` opens the join desk,
starts pod 0's own agent beside it and waits for the other pods' agents to join. Every other
pod runs an agent that joins the head, with no stdin lifeline: the head's heartbeats are its
lifeline, so a pod whose head is gone ends within ``RLMESH_HEAD_SILENCE_S``.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any, Mapping

from rlmesh.launcher.providers.base import ProviderError
from rlmesh.launcher.providers.joining import JoiningProvider, agent_argv, resolve

log = logging.getLogger(__name__)

ENV_INDEX = "JOB_COMPLETION_INDEX"
ENV_FILE = "RLMESH_CLUSTER_FILE"
ENV_HEAD = "RLMESH_HEAD_HOST"
ENV_PORT = "RLMESH_JOIN_PORT"
ENV_CURVE = "RLMESH_CURVE_DIR"


def pod_names(cluster: Any) -> list[str]:
    from rlmesh.launcher.providers.kubernetes import resource_names

    job, _ = resource_names(cluster.cluster_name)
    return [f"{job}-{i}" for i in range(cluster.kubernetes.nodes)]


class KubernetesProvider(JoiningProvider):
    name = "kubernetes"

    def __init__(self, cluster: Any, env: Mapping[str, str] | None = None) -> None:
        super().__init__(cluster, env)
        self.names = pod_names(cluster)
        self.join_port = cluster.kubernetes.join_port

    def node_resources(self) -> dict[str, float]:
        """CPUs, GPUs and memory as the manifests ask for them: what a container's process
        sees is the whole machine's."""
        return self.cluster.kubernetes.pod_resources()

    def curve_dir(self) -> str | None:
        """The Secret's mount (every pod has the same keys)."""
        return self.env.get(ENV_CURVE) or None

    def describe(self) -> str:
        return f"{len(self.names)} pod(s) of an Indexed Job, agents joining from each pod"


def pod_plan(env: Mapping[str, str] | None = None) -> tuple[str, list[str]]:
    """What this pod runs, read from its environment: ("launch", [cluster file]) on pod 0,
    else ("agent", the agent's argv). ProviderError (one line) where the environment is not
    a pod's of a rendered Job."""
    env = os.environ if env is None else env
    missing = [v for v in (ENV_INDEX, ENV_FILE, ENV_HEAD, ENV_PORT) if not env.get(v)]
    if missing:
        raise ProviderError(f"--from-env needs {', '.join(missing)} in the environment (a pod "
                            "of the Job that `rlmesh launch --render k8s` writes has them)")
    index = env[ENV_INDEX]
    if not index.isdigit():
        raise ProviderError(f"{ENV_INDEX}={index!r} is not a pod index")
    if int(index) == 0:
        return "launch", [env[ENV_FILE]]
    from rlmesh.launcher.cluster_config import ClusterConfigError, load_cluster

    try:
        cluster = load_cluster(env[ENV_FILE])
    except ClusterConfigError as exc:
        raise ProviderError(str(exc)) from None
    head = resolve(env[ENV_HEAD])
    curve = env.get(ENV_CURVE, "-") if cluster.security.curve else "-"
    node = socket.gethostname().split(".")[0]
    return "agent", agent_argv(node, head, env[ENV_PORT], f"pod-{cluster.cluster_name}", curve)
