"""Clusters of SSH-reachable nodes on this one machine (network namespaces made by
deploy/netns-cluster.sh), for tests of anything that runs across nodes. Needs root; skipped
where namespaces or sshd are unavailable, except on CI, where that is a failure."""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import psutil
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "netns-cluster.sh"
STATE_ROOT = Path(os.environ.get("RLMESH_NETNS_STATE_ROOT", "/tmp"))
# Prefixes of the clusters these fixtures make: "t" and 6 hex digits (the script allows 10).
TEST_PREFIX = "t"


@dataclass(frozen=True)
class Node:
    name: str  # "node1": the alias in the cluster's ssh_config
    address: str  # its IPv4 address on the cluster's bridge
    netns: str  # its network namespace, also its hostname


class NetnsCluster:
    """A running cluster: its nodes, the ssh credentials to reach them, and teardown."""

    user = "root"

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.state_dir = STATE_ROOT / f"rlmesh-netns-{prefix}"
        self.ssh_config = self.state_dir / "ssh_config"
        self.known_hosts = self.state_dir / "known_hosts"
        self.identity_file = self.state_dir / "id_ed25519"
        env = dict(
            line.split("=", 1)
            for line in (self.state_dir / "cluster.env").read_text().splitlines()
            if "=" in line
        )
        self.bridge = env["BRIDGE"]
        self.bridge_address = env["BRIDGE_ADDRESS"]
        self.nodes: dict[str, Node] = {}
        for line in (self.state_dir / "nodes.tsv").read_text().splitlines():
            name, address, netns = line.split("\t")
            self.nodes[name] = Node(name, address, netns)

    @property
    def names(self) -> list[str]:
        return list(self.nodes)

    def ssh_argv(self, node: str, command: str | Sequence[str], *options: str) -> list[str]:
        """ssh argv for ``command`` on ``node``; ``options`` ("-o", "Key=value", ...) go
        before the generated ones, and ssh takes the first value it is given."""
        remote = command if isinstance(command, str) else shlex.join(command)
        return [
            "ssh", "-F", str(self.ssh_config), *options,
            "-o", "BatchMode=yes",
            "-o", "ConnectTimeout=5",
            "-o", f"UserKnownHostsFile={self.known_hosts}",
            # Every host key is already in known_hosts: a new or changed key is an error.
            "-o", "StrictHostKeyChecking=yes",
            "-i", str(self.identity_file),
            "-l", self.user,
            self.nodes[node].address,
            remote,
        ]  # fmt: skip

    def ssh(
        self, node: str, command: str | Sequence[str], timeout: float = 15.0, *options: str
    ) -> subprocess.CompletedProcess[str]:
        """Run ``command`` (a shell line, or argv) on ``node`` over ssh; never raises on a
        non-zero exit, so a test can assert on returncode and stderr."""
        return subprocess.run(
            self.ssh_argv(node, command, *options),
            capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        )  # fmt: skip

    def ssh_each(
        self, command: str | Sequence[str], timeout: float = 15.0
    ) -> dict[str, subprocess.CompletedProcess[str]]:
        """``ssh(node, command)`` on every node at once, by node name."""
        with ThreadPoolExecutor(len(self.nodes)) as pool:
            futures = {name: pool.submit(self.ssh, name, command, timeout) for name in self.nodes}
            return {name: future.result() for name, future in futures.items()}

    def netns_exec(self, node: str, argv: Sequence[str]) -> list[str]:
        """argv that runs ``argv`` inside ``node``'s network namespace (no ssh)."""
        return ["ip", "netns", "exec", self.nodes[node].netns, *argv]

    def script(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run deploy/netns-cluster.sh ``args`` on this cluster (its --prefix added)."""
        return run_script(*args, "--prefix", self.prefix, check=check)

    def restart_sshd(self, node: str) -> None:
        self.script("restart", node)

    def down(self) -> None:
        self.script("down")


def run_script(
    *args: str, check: bool = True, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout
    )
    if check and proc.returncode != 0:
        raise RuntimeError(
            f"netns-cluster.sh {' '.join(args)} failed ({proc.returncode}):\n"
            f"{proc.stdout}{proc.stderr}"
        )
    return proc


def start_cluster(nodes: int) -> NetnsCluster:
    prefix = TEST_PREFIX + secrets.token_hex(3)
    try:
        run_script("up", str(nodes), "--prefix", prefix)
        cluster = NetnsCluster(prefix)
    except BaseException:
        run_script("down", "--prefix", prefix, check=False)  # the first error is the one to see
        raise
    # Marks the cluster as this session's: a later session removes it if this one was killed.
    (cluster.state_dir / "owner.pid").write_text(str(os.getpid()))
    return cluster


def remove_abandoned_clusters() -> None:
    """Take down test clusters whose pytest died before its teardown (killed on timeout):
    they would hold an address block and sshd processes forever."""
    for owner in STATE_ROOT.glob(f"rlmesh-netns-{TEST_PREFIX}*/owner.pid"):
        try:
            pid = int(owner.read_text())
        except (OSError, ValueError):
            continue
        if not psutil.pid_exists(pid):
            run_script("down", "--prefix", owner.parent.name.removeprefix("rlmesh-netns-"))


def on_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def unavailable_reason() -> str | None:
    """Why this machine cannot host a netns cluster, or None when it can."""
    if os.geteuid() != 0:
        return "netns cluster tests need root (network namespaces, sshd)"
    if not (shutil.which("sshd") or os.access("/usr/sbin/sshd", os.X_OK)):
        return "sshd not installed (apt-get install openssh-server)"
    for tool, package in [("ip", "iproute2"), ("ssh", "openssh-client"), ("unshare", "util-linux")]:
        if not shutil.which(tool):
            return f"'{tool}' not installed (apt-get install {package})"
    probe = f"rlmesh-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    if made.returncode != 0:
        return f"'ip netns add' is not permitted here: {made.stderr.strip()}"
    return None


def skip_unless(reason: str | None, tests: str = "the cluster tests") -> None:
    """Skip the test for ``reason`` (None: nothing missing), except on CI, where a broken
    environment must fail, not hide."""
    if reason is None:
        return
    if on_ci():
        pytest.fail(f"{reason} (CI=true: {tests} must run on CI, not be skipped)")
    pytest.skip(reason)


def require_netns() -> None:
    skip_unless(unavailable_reason())


@pytest.fixture(scope="session")
def netns_cluster() -> Iterator[NetnsCluster]:
    """Three nodes for the whole session, taken down at its end whatever happened."""
    require_netns()
    remove_abandoned_clusters()
    cluster = start_cluster(3)
    try:
        yield cluster
    finally:
        cluster.down()


@pytest.fixture
def netns_cluster_factory() -> Iterator:
    """``make(nodes)`` starts an extra cluster; any not already down is taken down after the
    test."""
    require_netns()
    made: list[NetnsCluster] = []

    def make(nodes: int = 2) -> NetnsCluster:
        made.append(start_cluster(nodes))
        return made[-1]

    try:
        yield make
    finally:
        for cluster in made:
            cluster.down()


from tests.cluster.slurm_cluster import slurm_cluster  # noqa: E402,F401  (a real Slurm on netns nodes)
