"""The ``ssh`` provider: the nodes the cluster file lists, reached over SSH from the head.
Each node gets the CURVE keys, the synced files and the setup commands (skipped when their
hash is unchanged), then its agent as the remote command of an ssh session whose stdin is
the agent's lifeline and whose stdout carries its ``RLMESH_READY`` line."""

from __future__ import annotations

import logging
import shlex
import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rlmesh.launcher.providers.base import MakeAgent, Provider
from rlmesh.launcher.remote import AgentProcess
from rlmesh.launcher.ssh import SSH
from rlmesh.runtime.run_dir import runs_root

log = logging.getLogger(__name__)

REMOTE_STATE = "~/.rlmesh/clusters"  # on each node: keys/ and the setup hash


class SSHProvider(Provider):
    name = "ssh"

    def __init__(self, cluster: Any) -> None:
        super().__init__(cluster)
        self.ssh = {n.name: SSH(cluster.ssh_target(n.name), cluster.state_dir / "ssh")
                    for n in cluster.nodes}
        self._curve = False

    def prepare(self, keys_dir: Any) -> None:
        """CURVE keys copied to every node, files synced, setup run (all nodes at once)."""
        self._curve = keys_dir is not None
        with ThreadPoolExecutor(max_workers=min(16, len(self.ssh) or 1)) as pool:
            list(pool.map(lambda node: self._prepare_node(node, keys_dir), self.ssh))

    def attach(self, keys_dir: Any) -> None:
        self._curve = keys_dir is not None

    def _prepare_node(self, node: str, keys_dir: Any) -> None:
        from rlmesh.wire.security import PUBLIC, SECRET

        ssh = self.ssh[node]
        remote = f"{REMOTE_STATE}/{self.cluster.cluster_name}"
        if keys_dir is not None:
            for name in (PUBLIC, SECRET):
                ssh.put_bytes((keys_dir / name).read_bytes(), f"{remote}/keys/{name}")
        for entry in self.cluster.sync:
            ssh.sync(entry)
        commands = list(self.cluster.setup_commands)
        if not commands:
            return
        digest = self.cluster.setup_hash()
        marker = f"{remote}/setup.hash"
        done = ssh.run(f"cat {marker} 2>/dev/null || true", timeout=30).stdout.decode().strip()
        if done == digest:
            log.info("%s: setup unchanged, skipped", node)
            return
        script = " && ".join(f"({c})" for c in commands)
        ssh.run([*env_prefix(self.cluster), "bash", "-lc", script], timeout=1800)
        ssh.run(f"mkdir -p {remote} && echo {digest} > {marker}", timeout=30)

    def make_agent(self, job: Any, node: str) -> MakeAgent:
        target = self.cluster.ssh_target(node)
        curve = f"{REMOTE_STATE}/{self.cluster.cluster_name}/keys" if self._curve else "-"
        command = [*env_prefix(self.cluster), target.python, "-m", "rlmesh.launcher.agent", node,
                   self.cluster.node(node).host, str(runs_root()), f"{job.job_id}-{node}", curve]
        # "~" reaches the remote shell unquoted, so the node expands it to its own home.
        text = " ".join(shlex.quote(c) if not c.startswith("~") else c for c in command)
        ssh = self.ssh[node]

        def make(spec: Any, run_dir: Any) -> AgentProcess:
            return AgentProcess(spec, run_dir, lambda: ssh.start(
                text, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT), node)
        return make

    def close(self) -> None:
        for ssh in self.ssh.values():
            ssh.close()


def env_prefix(cluster: Any) -> list[str]:
    """``env K=V ...`` for a remote command: the file's [env] and what the head passes on."""
    import os

    env = {"PYTHONUNBUFFERED": "1", **dict(cluster.env)}
    if "RLMESH_HEAD_SILENCE_S" in os.environ:  # how long agents wait for a silent head
        env.setdefault("RLMESH_HEAD_SILENCE_S", os.environ["RLMESH_HEAD_SILENCE_S"])
    return ["env", *(f"{k}={v}" for k, v in env.items())]
