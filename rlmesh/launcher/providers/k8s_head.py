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

import asyncio
import logging
import os
import socket
import subprocess
import sys
import time
from dataclasses import replace
from types import MappingProxyType
from typing import Any, Mapping

from rlmesh.launcher.providers.base import MakeAgent, Provider, ProviderError

log = logging.getLogger(__name__)

ENV_INDEX = "JOB_COMPLETION_INDEX"
ENV_FILE = "RLMESH_CLUSTER_FILE"
ENV_HEAD = "RLMESH_HEAD_HOST"
ENV_PORT = "RLMESH_JOIN_PORT"
ENV_CURVE = "RLMESH_CURVE_DIR"
RESOLVE_TIMEOUT_S = float(os.environ.get("RLMESH_JOIN_TIMEOUT_S", "300"))


def pod_names(cluster: Any) -> list[str]:
    from rlmesh.launcher.providers.kubernetes import resource_names

    job, _ = resource_names(cluster.cluster_name)
    return [f"{job}-{i}" for i in range(cluster.kubernetes.nodes)]


def resolve(host: str, timeout: float = RESOLVE_TIMEOUT_S) -> str:
    """``host``'s IPv4 address, waiting for it to appear (a pod's DNS record comes with the
    pod, and the head's pod may start after this one)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return socket.getaddrinfo(host, None, socket.AF_INET)[0][4][0]
        except OSError as exc:
            if time.monotonic() > deadline:
                raise ProviderError(f"cannot resolve the head's name {host!r} after "
                                    f"{timeout:.0f} s: {exc}") from None
            time.sleep(1.0)


class KubernetesProvider(Provider):
    name = "kubernetes"
    start_timeout = 600.0  # pods wait for images and nodes

    def __init__(self, cluster: Any, env: Mapping[str, str] | None = None) -> None:
        super().__init__(cluster)
        self.env = os.environ if env is None else env
        self.names = pod_names(cluster)
        self.desk: Any = None
        self._server: Any = None
        self._own: subprocess.Popen[bytes] | None = None

    def resolve(self) -> Any:
        """The pods as the cluster's nodes (CPUs and GPUs as the manifests ask for them) and
        the head on this pod's address."""
        from rlmesh.launcher.cluster_config import HeadConfig, NodeConfig

        k = self.cluster.kubernetes
        resources: dict[str, float] = {"GPU": float(k.gpus)}
        cpu = _cpu_count(k.cpu)
        if cpu is not None:
            resources["CPU"] = cpu
        nodes = tuple(NodeConfig(name=n, host=n, resources=MappingProxyType(dict(resources)))
                      for n in self.names)
        host = self.cluster.head.host or resolve(socket.gethostname())
        self.cluster = replace(self.cluster, nodes=nodes, head=HeadConfig(host=host))
        return self.cluster

    def describe(self) -> str:
        return f"{len(self.names)} pod(s) of an Indexed Job, agents joining from each pod"

    def keys(self) -> Any:
        """The Secret's keys, mounted where RLMESH_CURVE_DIR says (every pod has the same)."""
        from rlmesh.wire.security import ClusterKeys

        folder = self.env.get(ENV_CURVE)
        if not folder:
            return None
        return ClusterKeys.load(folder)

    async def begin(self, job: Any) -> None:
        from rlmesh.launcher.join import JoinDesk
        from rlmesh.runtime.actor import ActorServer
        from rlmesh.runtime.run_dir import runs_root

        self.desk = JoinDesk(self.names)
        self._server = ActorServer(self.desk, "join-desk", limits=job.limits)
        port = self.cluster.kubernetes.join_port
        host = self.cluster.head.host
        address = await self._server.start(f"tcp://{host}:{port}")
        curve = self.env.get(ENV_CURVE, "-") if self.cluster.security.curve else "-"
        # Pod 0's own agent, beside the head: its stdin is its lifeline, as over SSH.
        argv = [sys.executable, "-m", "rlmesh.launcher.agent", self.names[0], host,
                str(runs_root()), job.job_id, curve, "--join", address]
        log_file = open(job.run_dir.log_path(f"agent-{self.names[0]}"), "ab")
        self._own = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=log_file,
                                     stderr=subprocess.STDOUT,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1",
                                          **dict(self.cluster.env)})
        log_file.close()

    def make_agent(self, job: Any, node: str) -> MakeAgent:
        from rlmesh.launcher.join import JoinedAgent

        own, desk = self._own, self.desk
        is_own = node == self.names[0]

        def make(spec: Any, run_dir: Any) -> JoinedAgent:
            exit_code = (lambda: own.poll()) if is_own and own is not None else (lambda: None)
            return JoinedAgent(spec, run_dir, node, desk, exit_code,
                               lambda: None if exit_code() is None else "it exited")
        return make

    async def end(self) -> None:
        if self._own is not None:
            if self._own.stdin is not None:
                self._own.stdin.close()
            for _ in range(100):
                if self._own.poll() is not None:
                    break
                await asyncio.sleep(0.1)
            else:
                self._own.kill()
                self._own.wait()
            self._own = None
        if self._server is not None:
            self._server.close()
            self._server = None


def _cpu_count(text: Any) -> float | None:
    """A Kubernetes CPU quantity ("2", "500m", 1.5) as CPUs; None if it is not one."""
    s = str(text).strip()
    try:
        return float(s[:-1]) / 1000 if s.endswith("m") else float(s)
    except ValueError:
        return None


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
    from rlmesh.runtime.run_dir import runs_root

    try:
        cluster = load_cluster(env[ENV_FILE])
    except ClusterConfigError as exc:
        raise ProviderError(str(exc)) from None
    head = resolve(env[ENV_HEAD])
    curve = env.get(ENV_CURVE, "-") if cluster.security.curve else "-"
    node = socket.gethostname().split(".")[0]
    return "agent", [node, "auto", str(runs_root()), f"pod-{cluster.cluster_name}", curve,
                     "--join", f"tcp://{head}:{env[ENV_PORT]}", "--no-stdin"]
