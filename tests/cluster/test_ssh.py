"""rlmesh/launcher/ssh.py against real sshds in the netns cluster: output and exit codes, a shared
master connection, host keys pinned per cluster, failures sorted by cause, the agent's
lifeline session, and files copied over."""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import psutil
import pytest

from rlmesh.launcher.cluster_config import DEFAULT_SYNC_EXCLUDE, SSHTarget, SyncEntry
from rlmesh.launcher.ssh import (
    SSH,
    AuthFailed,
    HostKeyChanged,
    SSHError,
    Unreachable,
    quote_command,
)


def wait_for(condition: Callable[[], object], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return bool(condition())


def gone(pid: int) -> bool:
    """Exited (a zombie counts: where init does not reap, one lingers)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def processes_naming(text: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            cmdline = " ".join(p.info["cmdline"] or ())
            if p.info["status"] != psutil.STATUS_ZOMBIE and text in cmdline:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def master_check(ssh: SSH) -> subprocess.CompletedProcess[str]:
    """``ssh -O check`` with the options ``ssh`` runs commands with."""
    options, host = ssh.argv("true")[:-2], ssh.target.host
    return subprocess.run([*options, "-O", "check", host], capture_output=True, text=True,
                          timeout=10, stdin=subprocess.DEVNULL)


@pytest.fixture
def short_dir() -> Iterator[Callable[[], Path]]:
    """New folders for control sockets: pytest's tmp_path is too long for a unix socket."""
    made: list[Path] = []

    def make() -> Path:
        made.append(Path(tempfile.mkdtemp(prefix="rlmssh-", dir="/tmp")))
        return made[-1]

    yield make
    for path in made:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def connect(netns_cluster, short_dir) -> Iterator[Callable[..., SSH]]:
    """``connect(node, control_dir=None, **SSHTarget fields)``; every SSH made is closed after."""
    made: list[SSH] = []
    shared = short_dir()

    def make(node: str = "node1", control_dir: Path | None = None, **changes: object) -> SSH:
        target = SSHTarget(
            node=node, host=netns_cluster.nodes[node].address, port=22, user=netns_cluster.user,
            identity_file=netns_cluster.identity_file, python=sys.executable,
            connect_timeout_s=5.0, known_hosts=netns_cluster.known_hosts,
        )  # fmt: skip
        made.append(SSH(dataclasses.replace(target, **changes), control_dir or shared))
        return made[-1]

    yield make
    for ssh in made:
        ssh.close()


# --- the command line (no cluster) -------------------------------------------------------------

def test_argv_holds_every_option_and_one_quoted_command(tmp_path):
    known_hosts = tmp_path / "state" / "known_hosts"
    control = Path(tempfile.mkdtemp(prefix="rlmssh-", dir="/tmp"))
    try:
        target = SSHTarget(node="n1", host="10.213.0.250", port=2222, user="alice",
                           identity_file=tmp_path / "id", python="python3",
                           connect_timeout_s=2.5, known_hosts=known_hosts)
        argv = SSH(target, control).argv(["echo", "a b", "$HOME"])
    finally:
        shutil.rmtree(control)
    options = {argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "-o"}
    assert options >= {
        "BatchMode=yes", "StrictHostKeyChecking=accept-new", f"UserKnownHostsFile={known_hosts}",
        "GlobalKnownHostsFile=/dev/null", "ConnectTimeout=3", "ServerAliveInterval=5",
        "ServerAliveCountMax=3", "ControlMaster=auto", f"ControlPath={control}/%C",
        "ControlPersist=60", "LogLevel=ERROR", "IdentitiesOnly=yes",
    }  # fmt: skip
    assert argv[:2] == ["ssh", "-T"]
    assert " ".join(argv).count(" -p 2222 ") == 1 and f" -i {tmp_path / 'id'} " in " ".join(argv)
    assert " -l alice " in " ".join(argv)
    # The host, then the whole command as one string for the remote shell.
    assert argv[-2] == "10.213.0.250"
    assert shlex.split(argv[-1]) == ["echo", "a b", "$HOME"]
    assert quote_command("echo $HOME | wc") == "echo $HOME | wc"
    assert known_hosts.parent.is_dir() and known_hosts.parent.stat().st_mode & 0o777 == 0o700




# --- commands ----------------------------------------------------------------------------------

def test_run_returns_output_over_one_reused_master(netns_cluster, connect):
    ssh = connect("node2")
    out = ssh.run(["echo", "hello world"])
    assert out.returncode == 0 and out.stdout == b"hello world\n"
    first = master_check(ssh)
    assert first.returncode == 0, first.stderr
    assert ssh.run("hostname").stdout.decode().strip() == netns_cluster.nodes["node2"].netns
    assert ssh.run("cat", input=b"piped\x00bytes").stdout == b"piped\x00bytes"
    # The same master (same pid) served every command.
    second = master_check(ssh)
    assert second.returncode == 0 and second.stderr == first.stderr
    assert "Master running" in first.stderr


def test_a_control_dir_too_long_for_a_socket_still_multiplexes(connect, tmp_path):
    long_dir = tmp_path / ("state-" * 12) / "ssh"  # a unix socket path holds < 108 bytes
    ssh = connect("node3", control_dir=long_dir)
    try:
        assert ssh.control_dir != long_dir and len(str(ssh.control_dir)) < 50
        assert ssh.control_dir.stat().st_mode & 0o777 == 0o700
        assert ssh.run("echo hi").stdout == b"hi\n"
        assert master_check(ssh).returncode == 0
        # The same folder asked for again finds the same master.
        assert connect("node3", control_dir=long_dir).control_dir == ssh.control_dir
    finally:
        ssh.close()
        shutil.rmtree(ssh.control_dir, ignore_errors=True)


def test_a_failing_command_raises_with_its_status_and_stderr(connect):
    ssh = connect("node1")
    with pytest.raises(SSHError) as info:
        ssh.run("echo 'no such thing' >&2; exit 3")
    assert type(info.value) is SSHError
    assert info.value.returncode == 3 and info.value.node == "node1"
    assert "no such thing" in info.value.stderr and "no such thing" in str(info.value)
    assert "status 3" in str(info.value)
    with pytest.raises(SSHError) as info:
        ssh.run("false")
    assert info.value.returncode == 1
    out = ssh.run("echo partial; exit 3", check=False)
    assert (out.returncode, out.stdout) == (3, b"partial\n")


def test_a_command_past_its_timeout_is_killed(connect):
    ssh = connect("node1")
    ssh.run("true")  # connected first: the timeout is the command's alone
    started = time.monotonic()
    with pytest.raises(SSHError, match=r"took longer than 0\.5 s"):
        ssh.run("sleep 20", timeout=0.5)
    assert time.monotonic() - started < 5


# --- host keys and connection failures ---------------------------------------------------------

def test_a_new_host_key_is_recorded_and_a_changed_one_refused(netns_cluster, connect, short_dir,
                                                              tmp_path):
    node = netns_cluster.nodes["node3"]
    known_hosts = tmp_path / "cluster-state" / "known_hosts"
    key = netns_cluster.state_dir / "node3" / "ssh_host_ed25519_key"
    pub = key.with_suffix(".pub")

    def recorded() -> str:
        found = subprocess.run(["ssh-keygen", "-F", node.address, "-f", str(known_hosts)],
                               capture_output=True, text=True)
        return found.stdout

    first = connect("node3", control_dir=short_dir(), known_hosts=known_hosts)
    first.run("true")
    assert pub.read_text().split()[1] in recorded()  # accept-new: trusted on first contact
    first.close()

    saved = {p: p.read_bytes() for p in (key, pub)}
    try:
        key.unlink()
        pub.unlink()
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
                       check=True)
        netns_cluster.restart_sshd("node3")
        # A fresh control dir: a master opened before the change would still be trusted.
        again = connect("node3", control_dir=short_dir(), known_hosts=known_hosts)
        with pytest.raises(HostKeyChanged) as info:
            again.run("true")
        message = str(info.value)
        fix = f"ssh-keygen -R {node.address} -f {known_hosts}"
        assert "node3" in message and str(known_hosts) in message and fix in message
        assert info.value.returncode == 255
        # The hint works: the old key goes, the new one is recorded on the next contact.
        subprocess.run(shlex.split(fix), check=True, capture_output=True)
        again.run("true")
        assert pub.read_text().split()[1] in recorded()
    finally:
        for path, data in saved.items():
            path.write_bytes(data)
        netns_cluster.restart_sshd("node3")
    assert netns_cluster.ssh("node3", "true").returncode == 0


def test_an_address_nobody_answers_is_unreachable(netns_cluster, connect):
    block = ipaddress.ip_network(f"{netns_cluster.bridge_address}/27", strict=False)
    nobody = str(block.broadcast_address - 1)  # the block's last host address: no node's
    taken = {n.address for n in netns_cluster.nodes.values()} | {netns_cluster.bridge_address}
    assert nobody not in taken
    ssh = connect("node1", host=nobody, connect_timeout_s=1.0)
    started = time.monotonic()
    with pytest.raises(Unreachable, match=f"cannot reach node node1 at root@{nobody}:22"):
        ssh.run("true")
    assert time.monotonic() - started < 8

    refused = connect("node2", port=2)  # a node that is up, on a port nothing listens on
    with pytest.raises(Unreachable, match="Connection refused"):
        refused.run("true")


def test_a_wrong_key_is_an_auth_failure(connect, short_dir, tmp_path):
    wrong = tmp_path / "wrong_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong)], check=True)
    # Its own control dir: the shared one may hold a master that logged in with the right key.
    ssh = connect("node1", control_dir=short_dir(), identity_file=wrong)
    with pytest.raises(AuthFailed) as info:
        ssh.run("true")
    assert "refused the login" in str(info.value) and str(wrong) in str(info.value)
    assert "authorized_keys" in str(info.value)


# --- the agent's session -----------------------------------------------------------------------

def remote_reader(tmp_path: Path) -> tuple[list[str], Path, Path]:
    """A remote command that records its pid, reads stdin to EOF, then writes "eof"."""
    started, done = tmp_path / "started", tmp_path / "done"
    code = (f"import os, sys; open({str(started)!r}, 'w').write(str(os.getpid())); "
            f"sys.stdin.read(); open({str(done)!r}, 'w').write('eof')")
    return [sys.executable, "-c", code], started, done


def test_killing_the_ssh_client_ends_the_remote_command(connect, tmp_path):
    ssh = connect("node2")
    command, started, done = remote_reader(tmp_path)
    client = ssh.start(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: started.exists() and started.read_text())
        remote = int(started.read_text())
        assert os.getsid(client.pid) == client.pid  # its own session: no Ctrl-C from our terminal
        assert not list(ssh.control_dir.iterdir())  # no master: the session is the client's own
        time.sleep(0.3)
        assert not done.exists() and not gone(remote)  # the lifeline holds
    finally:
        client.kill()
        client.wait()
        client.stdin.close()
    assert wait_for(lambda: done.exists() and done.read_text() == "eof")
    assert wait_for(lambda: gone(remote))


HEAD = """
import json, subprocess, sys, threading, time
from pathlib import Path
from rlmesh.launcher.cluster_config import SSHTarget
from rlmesh.launcher.ssh import SSH

spec = json.loads(sys.argv[1])
fields = spec["target"]
fields.update(identity_file=Path(fields["identity_file"]), known_hosts=Path(fields["known_hosts"]))
ssh = SSH(SSHTarget(**fields), Path(spec["control_dir"]))
started = []
# From a thread that ends at once, as a pool's worker might: the client must outlive it.
worker = threading.Thread(target=lambda: started.append(ssh.start(spec["command"])))
worker.start()
worker.join()
client = started[0]
# Another holder of the lifeline's write end: the head's death alone would not close it, so
# only the death signal can end the client.
holder = subprocess.Popen(["sleep", "60"], pass_fds=[client.stdin.fileno()])
time.sleep(0.5)
print(client.pid, holder.pid, client.poll(), flush=True)
time.sleep(60)
"""


def test_the_ssh_client_dies_with_the_head(netns_cluster, short_dir, tmp_path):
    command, started, done = remote_reader(tmp_path)
    target = dict(node="node3", host=netns_cluster.nodes["node3"].address, port=22,
                  user=netns_cluster.user, identity_file=str(netns_cluster.identity_file),
                  python=sys.executable, connect_timeout_s=5.0,
                  known_hosts=str(netns_cluster.known_hosts))
    spec = {"target": target, "control_dir": str(short_dir()), "command": command}
    head = subprocess.Popen([sys.executable, "-c", HEAD, json.dumps(spec)],
                            stdout=subprocess.PIPE, text=True)
    holder = None
    try:
        client, holder, status = head.stdout.readline().split()
        client, holder = int(client), int(holder)
        assert status == "None"  # alive after the thread that started it ended
        assert wait_for(lambda: started.exists() and started.read_text())
        remote = int(started.read_text())
        head.send_signal(signal.SIGKILL)
        head.wait()
        assert wait_for(lambda: gone(client), 5)
        assert wait_for(lambda: done.exists() and done.read_text() == "eof")
        assert wait_for(lambda: gone(remote))
    finally:
        head.kill()
        head.wait()
        head.stdout.close()
        if holder is not None and not gone(holder):
            os.kill(holder, signal.SIGKILL)


def test_start_from_a_short_lived_thread_keeps_the_client(connect, tmp_path):
    ssh = connect("node1")
    command, started, done = remote_reader(tmp_path)
    clients = []
    worker = threading.Thread(target=lambda: clients.append(
        ssh.start(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)))
    worker.start()
    worker.join()
    client = clients[0]
    try:
        assert wait_for(lambda: started.exists() and started.read_text())
        time.sleep(0.3)
        assert client.poll() is None and not done.exists()
        client.stdin.close()  # the ordinary end: the remote command reads EOF, ssh exits
        assert client.wait(timeout=10) == 0
        assert done.read_text() == "eof"
    finally:
        client.kill()
        client.wait()


# --- files -------------------------------------------------------------------------------------

def test_put_bytes_writes_a_private_file_atomically(connect, tmp_path):
    ssh = connect("node2")
    path = tmp_path / "keys" / "deeper" / "server.key_secret"
    data = b"secret\n\x00\xffbinary"
    ssh.put_bytes(data, str(path))
    assert ssh.run(["cat", str(path)]).stdout == data
    modes = ssh.run(["stat", "-c", "%a %s", str(path), str(path.parent), str(path.parent.parent)])
    assert modes.stdout.decode().split("\n")[:3] == [f"600 {len(data)}", "700 4096", "700 4096"]

    ssh.put_bytes(b"public", str(path), mode=0o644)  # replaced in place, no temp file left
    assert ssh.run(["cat", str(path)]).stdout == b"public"
    assert ssh.run(["stat", "-c", "%a", str(path)]).stdout == b"644\n"
    assert ssh.run(["ls", "-A", str(path.parent)]).stdout == b"server.key_secret\n"

    (tmp_path / "a_file").write_text("")
    blocked = tmp_path / "a_file" / "key"
    with pytest.raises(SSHError, match=f"writing {blocked} exited with status 1") as info:
        ssh.put_bytes(b"x", str(blocked))
    assert "Not a directory" in info.value.stderr or "File exists" in info.value.stderr


def test_put_bytes_takes_a_path_in_the_home(connect):
    ssh = connect("node1")
    folder = f".rlmesh-test-{os.getpid()}-{time.monotonic_ns()}"
    try:
        ssh.put_bytes(b"at home", f"~/{folder}/k")
        assert ssh.run(f'cat "$HOME"/{folder}/k').stdout == b"at home"
    finally:
        ssh.run(f'rm -rf "$HOME"/{folder}')


def test_sync_copies_a_folder_with_modes_links_and_excludes(connect, tmp_path):
    src = tmp_path / "code"
    (src / "pkg" / "__pycache__").mkdir(parents=True)
    (src / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (src / "run.sh").chmod(0o755)
    (src / "pkg" / "conf.txt").write_text("lr = 0.1\n")
    (src / "pkg" / "conf.txt").chmod(0o644)
    (src / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"\0")
    (src / "stale.pyc").write_bytes(b"\0")
    (src / "debug.log").write_text("excluded by the entry's own pattern\n")
    (src / "latest").symlink_to("run.sh")
    dst = tmp_path / "on-node" / "code"
    ssh = connect("node3")
    ssh.sync(SyncEntry(src=src, dst=str(dst), exclude=(*DEFAULT_SYNC_EXCLUDE, "*.log")))

    listed = ssh.run(f"cd {shlex.quote(str(dst))} && find . ! -type d -printf '%P %y %m\\n' | sort")
    assert listed.stdout.decode().splitlines() == [
        "latest l 777", "pkg/conf.txt f 644", "run.sh f 755",
    ]  # fmt: skip
    assert ssh.run([str(dst / "latest")]).stdout == b"ran\n"
    assert ssh.run(["cat", str(dst / "pkg" / "conf.txt")]).stdout == b"lr = 0.1\n"

    # A single file lands in dst under its own name.
    ssh.sync(SyncEntry(src=src / "pkg" / "conf.txt", dst=str(dst / "one")))
    assert ssh.run(["cat", str(dst / "one" / "conf.txt")]).stdout == b"lr = 0.1\n"


# --- closing -----------------------------------------------------------------------------------

def test_close_ends_the_master_and_leaves_no_ssh_running(connect, short_dir):
    control = short_dir()
    ssh = connect("node1", control_dir=control)
    ssh.run("true")
    assert master_check(ssh).returncode == 0
    assert processes_naming(str(control))  # the master, as "ssh: <control>/<hash> [mux]"
    ssh.close()
    assert master_check(ssh).returncode != 0
    assert wait_for(lambda: not processes_naming(str(control)), 5)
    assert not [p for p in psutil.Process().children(recursive=True) if p.name() == "ssh"]
    assert not list(control.iterdir())
    ssh.close()  # twice is fine
