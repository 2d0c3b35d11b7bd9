"""Providers whose agents join the head rather than being started by it, and whose head runs
beside one of them: the pods of a Kubernetes Job (providers/k8s_head.py) and the processes of
a ``torchrun`` launch (providers/torchrun.py). The engine (Kubernetes, torchrun) starts one
process per node; the first becomes the head, which opens the join desk (launcher/join.py),
starts its own node's agent beside it (stdin its lifeline, a session of its own so that the
agent's "parent gone" kill of its process group cannot reach the head) and waits for the
others. The others run an agent that joins; the head's heartbeats are their lifeline.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from dataclasses import replace
from types import MappingProxyType
from typing import Any, Mapping

from rlmesh.launcher.providers.base import MakeAgent, Provider, ProviderError

RESOLVE_TIMEOUT_S = float(os.environ.get("RLMESH_JOIN_TIMEOUT_S", "300"))


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


class JoiningProvider(Provider):
    """Nodes ``names`` (the head's own first), each with ``resources`` where the provider
    knows them (the rest detected by its agent); the head bound on ``head_host()``, the join
    desk on ``join_port``."""

    start_timeout = 600.0  # pods wait for images and nodes; torchrun for its rendezvous

    def __init__(self, cluster: Any, env: Mapping[str, str] | None = None) -> None:
        super().__init__(cluster)
        self.env = os.environ if env is None else env
        self.names: list[str] = []
        self.join_port = 0
        self.desk: Any = None
        self._server: Any = None
        self._own: subprocess.Popen[bytes] | None = None

    def node_resources(self) -> dict[str, float]:
        return {}

    def head_host(self) -> str:
        return resolve(socket.gethostname())

    def curve_dir(self) -> str | None:
        return None

    def resolve(self) -> Any:
        from rlmesh.launcher.cluster_config import HeadConfig, NodeConfig

        resources = self.node_resources()
        nodes = tuple(NodeConfig(name=n, host=n, resources=MappingProxyType(dict(resources)))
                      for n in self.names)
        host = self.cluster.head.host or self.head_host()
        self.cluster = replace(self.cluster, nodes=nodes, head=HeadConfig(host=host))
        return self.cluster

    def keys(self) -> Any:
        """The keys every process was given (a Secret's mount, a shared folder)."""
        from rlmesh.wire.security import ClusterKeys

        folder = self.curve_dir()
        return ClusterKeys.load(folder) if folder else None

    async def begin(self, job: Any) -> None:
        from rlmesh.launcher.join import JoinDesk
        from rlmesh.runtime.actor import ActorServer
        from rlmesh.runtime.run_dir import runs_root

        self.desk = JoinDesk(self.names)
        self._server = ActorServer(self.desk, "join-desk", limits=job.limits)
        host = self.cluster.head.host
        address = await self._server.start(f"tcp://{host}:{self.join_port}")
        curve = (self.curve_dir() or "-") if self.cluster.security.curve else "-"
        argv = [sys.executable, "-m", "rlmesh.launcher.agent", self.names[0], host,
                str(runs_root()), job.job_id, curve, "--join", address]
        with open(job.run_dir.log_path(f"agent-{self.names[0]}"), "ab") as log_file:
            self._own = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=log_file,
                                         stderr=subprocess.STDOUT, start_new_session=True,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1",
                                              **dict(self.cluster.env)})

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
                self._own.stdin.close()  # its lifeline: it stops, and its actors with it
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


def agent_argv(node: str, head: str, port: int | str, job_id: str, curve: str) -> list[str]:
    """The argv (for launcher.agent's main) of an agent that joins the head at ``head``."""
    from rlmesh.runtime.run_dir import runs_root

    return [node, "auto", str(runs_root()), job_id, curve, "--join", f"tcp://{head}:{port}",
            "--no-stdin"]
