"""The netns cluster that multi-node tests stand on: nodes with their own addresses and
sshd, reachable from here and from each other, host keys checked, nothing left after down."""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import time

import psutil

PYTHON = shlex.quote(sys.executable)


def test_every_node_answers_over_ssh_with_its_own_name_and_address(netns_cluster):
    assert len(netns_cluster.nodes) == 3
    addresses = {node.address for node in netns_cluster.nodes.values()}
    assert len(addresses) == 3 and netns_cluster.bridge_address not in addresses
    for name, out in netns_cluster.ssh_each("hostname && ip -4 -o addr show").items():
        node = netns_cluster.nodes[name]
        assert out.returncode == 0, out.stderr
        hostname, _, addrs = out.stdout.partition("\n")
        assert hostname == node.netns
        # Loopback and its own address on eth0: none of the other nodes' or this machine's.
        assert re.findall(r"^\d+: (\S+)\s+inet ([\d.]+)/", addrs, re.M) == [
            ("lo", "127.0.0.1"), ("eth0", node.address)
        ]  # fmt: skip


def test_a_node_logs_in_to_another_node_over_the_bridge(netns_cluster):
    config = shlex.quote(str(netns_cluster.ssh_config))
    out = netns_cluster.ssh("node1", f"ssh -F {config} node2 'hostname; echo $SSH_CONNECTION'")
    assert out.returncode == 0, out.stderr
    hostname, connection = out.stdout.split("\n")[:2]
    assert hostname == netns_cluster.nodes["node2"].netns
    # SSH_CONNECTION is "client_ip client_port server_ip server_port": node1 to node2 directly.
    client, _, server, port = connection.split()
    assert (client, server, port) == (
        netns_cluster.nodes["node1"].address, netns_cluster.nodes["node2"].address, "22"
    )  # fmt: skip


def test_sockets_between_nodes_and_back_to_this_machine(netns_cluster):
    """What the launcher needs: node to node, and node to the head on the bridge address."""
    node3 = netns_cluster.nodes["node3"]
    server = subprocess.Popen(
        netns_cluster.netns_exec("node3", [sys.executable, "-c", (
            "import socket\n"
            f"s = socket.create_server(({node3.address!r}, 0))\n"
            "print(s.getsockname()[1], flush=True)\n"
            "c, peer = s.accept()\n"
            "c.sendall(f'node3 saw {peer[0]}'.encode())\n"
        )]),
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        port = int(server.stdout.readline())
        out = netns_cluster.ssh("node1", (
            f"{PYTHON} -c \"import socket; "
            f"print(socket.create_connection(('{node3.address}', {port}), 5).recv(100).decode())\""
        ))  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == f"node3 saw {netns_cluster.nodes['node1'].address}"
    finally:
        server.kill()
        server.wait()

    with socket.create_server((netns_cluster.bridge_address, 0)) as head:
        head.settimeout(10)
        port = head.getsockname()[1]
        client = subprocess.Popen(
            netns_cluster.ssh_argv("node2", (
                f"{PYTHON} -c \"import socket; "
                f"socket.create_connection(('{netns_cluster.bridge_address}', {port}), 5)"
                ".sendall(b'hello from node2')\""
            )), stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            conn, peer = head.accept()
            with conn:
                assert conn.recv(100) == b"hello from node2"
            assert peer[0] == netns_cluster.nodes["node2"].address
        finally:
            client.wait(timeout=15)
        assert client.returncode == 0, client.stderr.read()


def test_the_repo_venv_python_runs_on_every_node(netns_cluster):
    import rlmesh

    # one a line: the clone's path may hold spaces
    code = "import socket, rlmesh; print(rlmesh.__file__, socket.gethostname(), sep=chr(10))"
    for name, out in netns_cluster.ssh_each(f"{PYTHON} -c '{code}'").items():
        assert out.returncode == 0, out.stderr
        assert out.stdout.splitlines() == [rlmesh.__file__, netns_cluster.nodes[name].netns]


def test_a_changed_host_key_is_refused(netns_cluster):
    key = netns_cluster.state_dir / "node3" / "ssh_host_ed25519_key"
    saved = {p: p.read_bytes() for p in (key, key.with_suffix(".pub"))}
    try:
        key.unlink()
        key.with_suffix(".pub").unlink()
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True
        )
        netns_cluster.restart_sshd("node3")
        out = netns_cluster.ssh("node3", "true", 15.0, "-o", "StrictHostKeyChecking=yes")
        assert out.returncode == 255
        assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in out.stderr
        assert "Host key verification failed" in out.stderr
        # accept-new only trusts keys of unknown hosts; it too refuses a changed one.
        out = netns_cluster.ssh("node3", "true", 15.0, "-o", "StrictHostKeyChecking=accept-new")
        assert out.returncode == 255 and "Host key verification failed" in out.stderr
        # The other nodes are untouched.
        assert netns_cluster.ssh("node1", "true").returncode == 0
    finally:
        for path, data in saved.items():
            path.write_bytes(data)
        netns_cluster.restart_sshd("node3")
    out = netns_cluster.ssh("node3", "hostname")
    assert out.returncode == 0, out.stderr


def _sshd_of(prefix):
    """sshd listeners started for cluster ``prefix`` (their argv names its config)."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            cmdline = " ".join(p.info["cmdline"] or ())
            # A zombie has let go of its namespace; where init does not reap, it lingers.
            if p.info["status"] != psutil.STATUS_ZOMBIE and f"rlmesh-netns-{prefix}/" in cmdline:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def _processes_in_net_namespaces(inodes):
    found = []
    for p in psutil.process_iter():
        try:
            link = os.readlink(f"/proc/{p.pid}/ns/net")
        except OSError:
            continue
        if int(link.removeprefix("net:[").rstrip("]")) in inodes:
            found.append(p)
    return found


def test_down_leaves_nothing_and_clusters_stay_apart(netns_cluster, netns_cluster_factory):
    other = netns_cluster_factory(2)
    assert other.bridge_address != netns_cluster.bridge_address
    # A node of one cluster cannot reach a node of another: each is its own subnet, unrouted.
    reach = subprocess.run(
        other.netns_exec("node1", [
            sys.executable, "-c",
            f"import socket; socket.create_connection(({netns_cluster.nodes['node1'].address!r}, 22), 2)",
        ]),
        capture_output=True, text=True,
    )  # fmt: skip
    assert reach.returncode != 0 and "unreachable" in reach.stderr

    # A session in progress at teardown must die too. Killing its sshd normally sends a FIN,
    # but nothing guarantees it leaves before the link is gone: keepalives let the client
    # notice a silent peer as well, as the launcher's own connections do.
    session = subprocess.Popen(other.ssh_argv(
        "node2", "sleep 600", "-o", "ServerAliveInterval=1", "-o", "ServerAliveCountMax=3",
    ))  # fmt: skip
    try:
        _tear_down_under_a_session(netns_cluster, other, session)
    finally:
        if session.poll() is None:
            session.kill()
            session.wait()


def _tear_down_under_a_session(netns_cluster, other, session):
    namespaces = [node.netns for node in other.nodes.values()]
    inodes = {os.stat(f"/run/netns/{ns}").st_ino for ns in namespaces}
    deadline = time.monotonic() + 10
    # Two sshd listeners, and the session's sshd processes and shell.
    while len(_processes_in_net_namespaces(inodes)) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(_processes_in_net_namespaces(inodes)) >= 4
    assert _sshd_of(other.prefix)

    # `up` again on a running cluster changes nothing.
    assert "already up" in other.script("up", "2").stdout

    other.down()
    assert session.wait(timeout=20) == 255  # the connection dropped
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    assert not set(namespaces) & {line.split()[0] for line in listed.stdout.splitlines()}
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True)
    assert f" {other.prefix}-" not in links.stdout  # no bridge, no veth
    assert not _processes_in_net_namespaces(inodes)
    assert not _sshd_of(other.prefix)
    assert not other.state_dir.exists()
    other.down()  # twice is fine

    # The session's cluster did not notice.
    assert netns_cluster.ssh("node1", "true").returncode == 0

