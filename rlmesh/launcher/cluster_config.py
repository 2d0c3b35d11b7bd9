"""The cluster file of ``rlmesh launch``: one TOML file with the nodes, how to reach them, what
to set up on them and the job to run, read into frozen dataclasses and checked key by key.
Re-exported here: JobConfig (cluster_job), detect_resources and config_hash (node_resources)."""

from __future__ import annotations

import fnmatch
import ipaddress
import math
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping, Sequence

# SCRIPT_KEYS and TRAIN_KEYS are only re-exported, beside this module's SSH_KEYS and NODE_KEYS
from rlmesh.launcher.cluster_job import SCRIPT_KEYS, TRAIN_KEYS, JobConfig, _parse_job
from rlmesh.launcher.cluster_values import (BUILTIN_RESOURCES, NODE_RESOURCE, TOP_KEYS, _array,
                                            _boolean, _host, _Invalid, _join, _labels, _misplaced,
                                            _optional,
                                            _path, _port, _python, _resources, _show, _string,
                                            _strings, _table, _toml_text, _user)
from rlmesh.placement.node_resources import config_hash, detect_resources
from rlmesh.placement.scheduler import Node

__all__ = ["BUILTIN_RESOURCES", "ClusterConfig", "ClusterConfigError", "HeadConfig", "JobConfig",
           "NodeConfig", "SSHConfig", "SSHTarget", "SecurityConfig", "SyncEntry", "config_hash",
           "detect_resources", "load_cluster", "parse_cluster"]

HEAD = "head"  # the head's name among the scheduler's nodes; no [[nodes]] entry may take it
STATE_ROOT = "~/.rlmesh/clusters"  # <root>/<cluster_name>/: known_hosts, keys, logs
DEFAULT_SYNC_EXCLUDE = (".git", "__pycache__", "*.pyc")
SSH_KEYS = ("user", "identity_file", "port", "connect_timeout_s", "python", "known_hosts")
NODE_KEYS = ("name", "host", "port", "user", "identity_file", "python", "resources", "labels")

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}\Z")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")


class ClusterConfigError(ValueError):
    """A cluster file that cannot be used: the message names the file, the key (a dotted path
    such as ``nodes[2].resources.GPU``) and what was expected there."""

    def __init__(self, message: str, *, source: str = "", key: str = "") -> None:
        super().__init__(": ".join(p for p in (source, key, message) if p))
        self.source, self.key, self.reason = source, key, message



# --- the dataclasses ---------------------------------------------------------------------------

@dataclass(frozen=True)
class SSHConfig:
    """``[ssh]``: how the head reaches every node, unless a node says otherwise."""

    user: str | None = None  # None: ssh's own choice (~/.ssh/config, else the local user)
    identity_file: Path | None = None  # None: ssh's own keys and agent
    port: int = 22
    connect_timeout_s: float = 10.0
    python: str = "python3"  # the interpreter on the nodes, with rlmesh installed
    known_hosts: Path | None = None  # None: ClusterConfig.known_hosts, a file per cluster


@dataclass(frozen=True)
class HeadConfig:
    """``[head]``: the machine running ``rlmesh launch``, the driver and a job's script."""

    host: str  # the address nodes reach the head on; the head's cluster sockets bind to it
    # None: the head only drives. A mapping (empty: detect all) makes it a node that takes work.
    resources: Mapping[str, float] | None = None
    labels: tuple[str, ...] = ()

    @property
    def takes_work(self) -> bool:
        return self.resources is not None


@dataclass(frozen=True)
class NodeConfig:
    """One ``[[nodes]]`` entry. ``None`` fields fall back to ``[ssh]``; resources holds only
    what the file gives, so an absent CPU (detect it) differs from ``CPU = 0`` (no CPUs)."""

    name: str
    host: str
    port: int | None = None
    user: str | None = None
    identity_file: Path | None = None
    python: str | None = None
    resources: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    labels: tuple[str, ...] = ()  # custom resources of 1 each

    @property
    def undeclared(self) -> tuple[str, ...]:
        """The built-in resources to detect on the node: those the file does not give."""
        return tuple(r for r in BUILTIN_RESOURCES if r not in self.resources)


@dataclass(frozen=True)
class SSHTarget:
    """Everything ssh needs for one node, its overrides and ``[ssh]`` merged."""

    node: str
    host: str
    port: int
    user: str | None
    identity_file: Path | None
    python: str
    connect_timeout_s: float
    known_hosts: Path


@dataclass(frozen=True)
class SyncEntry:
    """``[[sync]]``: a file or folder of the head copied to ``dst`` on every node (absolute, or
    relative to the ssh user's home) before the setup commands run."""

    src: Path  # absolute
    dst: str
    exclude: tuple[str, ...] = DEFAULT_SYNC_EXCLUDE  # glob patterns on names or relative paths

    def files(self) -> list[tuple[str, Path]]:
        """(path relative to ``src``, path here) of every entry copied, sorted. A folder's
        symlinks are entries of their own (copied as links, never followed)."""
        if not self.src.is_dir():
            return [(self.src.name, self.src.resolve())]
        found = []
        for root, dirs, names in os.walk(self.src):
            rel_root = Path(root).relative_to(self.src)
            keep = []
            for name in dirs:
                rel = (rel_root / name).as_posix()
                if self._excluded(name, rel):
                    continue
                if (Path(root) / name).is_symlink():
                    found.append((rel, Path(root) / name))
                else:
                    keep.append(name)
            dirs[:] = sorted(keep)
            found += [((rel_root / n).as_posix(), Path(root) / n) for n in names
                      if not self._excluded(n, (rel_root / n).as_posix())]
        return sorted(found)

    def _excluded(self, name: str, rel: str) -> bool:
        return any(fnmatch.fnmatch(name, p) or fnmatch.fnmatch(rel, p) for p in self.exclude)


@dataclass(frozen=True)
class SecurityConfig:
    """``[security]``: CURVE on every cluster TCP socket unless explicitly turned off."""

    curve: bool = True
    insecure_trusted_network: bool = False


@dataclass(frozen=True)
class ClusterConfig:
    """A whole cluster file, checked. Paths in it are absolute (relative ones were taken from
    the file's folder)."""

    cluster_name: str
    head: HeadConfig
    job: JobConfig
    nodes: tuple[NodeConfig, ...] = ()
    ssh: SSHConfig = SSHConfig()
    setup_commands: tuple[str, ...] = ()
    sync: tuple[SyncEntry, ...] = ()
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    security: SecurityConfig = SecurityConfig()
    source: str = "<cluster>"
    # Where the nodes come from (providers/): "ssh" lists them here; "slurm" and
    # "kubernetes" are given them by the cluster's engine, with these tables' settings.
    provider: str = "ssh"
    slurm: Any = None  # providers.slurm.SlurmConfig
    kubernetes: Any = None  # providers.kubernetes.KubernetesConfig
    torchrun: Any = None  # providers.tables.TorchrunConfig

    @property
    def state_dir(self) -> Path:
        """This cluster's folder on the head: known hosts, CURVE keys, logs."""
        # $RLMESH_CLUSTERS_DIR moves it (tests keep their clusters out of the home folder).
        return Path(os.environ.get("RLMESH_CLUSTERS_DIR", STATE_ROOT)).expanduser() / self.cluster_name

    @property
    def known_hosts(self) -> Path:
        return self.ssh.known_hosts or self.state_dir / "known_hosts"

    def node(self, name: str) -> NodeConfig:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"{self.source}: no node {name!r} (nodes: "
                       f"{', '.join(n.name for n in self.nodes) or 'none'})")

    def ssh_target(self, name: str) -> SSHTarget:
        """How to reach node ``name``: its own settings, else ``[ssh]``'s."""
        node, ssh = self.node(name), self.ssh
        return SSHTarget(
            node=node.name, host=node.host, port=node.port or ssh.port,
            user=node.user or ssh.user, identity_file=node.identity_file or ssh.identity_file,
            python=node.python or ssh.python, connect_timeout_s=ssh.connect_timeout_s,
            known_hosts=self.known_hosts)

    def setup_hash(self) -> str:
        """Changes exactly when the setup commands or the synced files do (see config_hash)."""
        return config_hash(self.setup_commands, self.sync)

    def needs_detection(self) -> list[str]:
        """Names of the scheduler's nodes (``head`` included) with a built-in resource the
        file leaves out: detect_resources must run there before scheduler_nodes."""
        names = [HEAD] if self.head.takes_work and _missing(self.head.resources or {}) else []
        return names + [n.name for n in self.nodes if n.undeclared]

    def scheduler_nodes(self, detected: Mapping[str, Mapping[str, float]]) -> list[Node]:
        """The scheduler's nodes: each node's ``detected`` resources (by name) overridden by
        those the file declares, its labels as 1 each and ``node:<name>`` = 1. The head comes
        first, as ``head``, if it takes work. A CPU or GPU known neither way is an error."""
        members: list[tuple[str, str, Mapping[str, float], tuple[str, ...]]] = []
        if self.head.resources is not None:
            members.append((HEAD, "head", self.head.resources, self.head.labels))
        members += [(n.name, f"nodes[{i}]", n.resources, n.labels)
                    for i, n in enumerate(self.nodes)]
        strangers = set(detected) - {m[0] for m in members}
        if strangers:
            raise ValueError(f"detected resources of {', '.join(sorted(strangers))}, which "
                             f"{'is' if len(strangers) == 1 else 'are'} no node of {self.source}")
        out = []
        for name, key, declared, labels in members:
            merged = {**detected.get(name, {}), **declared}
            for r in _missing(merged, ("CPU", "GPU")):
                raise ClusterConfigError("not given in the file, and not detected on the node",
                                         source=self.source, key=f"{key}.resources.{r}")
            merged.update({label: 1.0 for label in labels})
            merged[NODE_RESOURCE + name] = 1.0
            out.append(Node(name, merged))
        return out


def _missing(resources: Mapping[str, float], names: Sequence[str] = BUILTIN_RESOURCES) -> list[str]:
    return [r for r in names if r not in resources]


# --- reading the file --------------------------------------------------------------------------

def load_cluster(path: str | os.PathLike[str]) -> ClusterConfig:
    """Read and check the cluster file at ``path``."""
    source = os.fspath(path)
    try:
        text = Path(source).expanduser().read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ClusterConfigError("no such file", source=source) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ClusterConfigError(f"cannot read it: {e}", source=source) from None
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pyproject installs tomli there
        import tomli as tomllib
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        message = str(e)
        where = _TOML_POSITION.search(message)
        if where:
            message = f"line {where[1]}, column {where[2]}: {message[:where.start()]}"
        raise ClusterConfigError(f"invalid TOML at {message}", source=source) from None
    return parse_cluster(data, source)


def parse_cluster(data: dict[str, Any], source: str) -> ClusterConfig:
    """Check ``data`` (a parsed cluster file) into a ClusterConfig. ``source`` names it in
    errors; relative paths in it are taken from ``source``'s folder."""
    base = Path(source).expanduser().parent.absolute()
    try:
        return _parse(data, source, base)
    except _Invalid as e:
        raise ClusterConfigError(e.reason, source=source, key=e.key) from None


def _parse(data: Any, source: str, base: Path) -> ClusterConfig:
    data = _table(data, "", TOP_KEYS, required=("cluster_name", "job"))
    name = _string(data["cluster_name"], "cluster_name", _NAME,
                   "a name of letters, digits, '-' and '_' (at most 64, no leading '-' or '_')")
    provider = _parse_provider(data)
    ssh = _parse_ssh(data.get("ssh", {}), base)
    if provider == "ssh":
        if "head" not in data:
            raise _Invalid("head", "missing, and required" + _misplaced(data, "head"))
        head = _parse_head(data["head"])
        nodes = tuple(_parse_node(entry, f"nodes[{i}]", base)
                      for i, entry in enumerate(_array(data.get("nodes", []), "nodes")))
        _check_nodes(nodes, head, ssh)
    else:
        head, nodes = _parse_given_head(data.get("head", {}), provider), ()
    commands = _strings(data.get("setup_commands", []), "setup_commands")
    sync = tuple(_parse_sync(entry, f"sync[{i}]", base)
                 for i, entry in enumerate(_array(data.get("sync", []), "sync")))
    slurm = kubernetes = torchrun = None
    if provider == "torchrun":
        from rlmesh.launcher.providers.tables import parse_torchrun

        torchrun = parse_torchrun(data.get("torchrun", {}))
    if provider == "slurm":
        from rlmesh.launcher.providers.tables import parse_slurm

        slurm = parse_slurm(data.get("slurm", {}))
    if provider == "kubernetes":
        from rlmesh.launcher.providers.kubernetes import parse_kubernetes

        kubernetes = parse_kubernetes(data.get("kubernetes", {}))
    return ClusterConfig(
        cluster_name=name, head=head, job=_parse_job(data["job"], base), nodes=nodes, ssh=ssh,
        setup_commands=commands, sync=sync, env=_parse_env(data.get("env", {})),
        security=_parse_security(data.get("security", {})), source=source, provider=provider,
        slurm=slurm, kubernetes=kubernetes, torchrun=torchrun)


def _parse_provider(data: dict[str, Any]) -> str:
    """``provider``, and the tables that belong to other providers refused."""
    from rlmesh.launcher.providers.base import PROVIDERS

    provider = data.get("provider", "ssh")
    if provider not in PROVIDERS:
        raise _Invalid("provider", f"expected one of {', '.join(map(repr, PROVIDERS))}, got "
                       f"{_show(provider)}")
    for table in ("slurm", "kubernetes", "torchrun"):
        if table in data and table != provider:
            raise _Invalid(table, f"a [{table}] table, but provider is {provider!r}: set "
                           f"provider = \"{table}\" (a top-level key) or remove the table")
    if provider != "ssh":
        where = {"slurm": "the Slurm allocation", "kubernetes": "the Job's pods",
                 "torchrun": "torchrun's processes"}[provider]
        if "nodes" in data:
            raise _Invalid("nodes", f"provider {provider!r} takes its nodes from {where}; "
                           "remove the [[nodes]] entries")
        for key in ("ssh", "sync", "setup_commands"):
            if key in data:
                raise _Invalid(key, f"{key} is for provider 'ssh' (provider {provider!r} has "
                               f"no SSH to the nodes: put setup in the "
                               f"{'batch script (slurm.setup)' if provider == 'slurm' else 'image or environment'})")
    return provider


def _parse_given_head(value: Any, provider: str) -> HeadConfig:
    """``[head]`` where the provider places the head (the batch host, pod 0): only its
    address may be given, for a head whose nodes reach it on another network."""
    data = _table(value, "head", ("host",))
    host = _host(data["host"], "head.host") if "host" in data else ""
    return HeadConfig(host=host)


def _parse_ssh(value: Any, base: Path) -> SSHConfig:
    data = _table(value, "ssh", SSH_KEYS)
    defaults = SSHConfig()
    timeout = data.get("connect_timeout_s", defaults.connect_timeout_s)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) \
            or not math.isfinite(timeout) or timeout <= 0:
        raise _Invalid("ssh.connect_timeout_s", f"expected a number of seconds > 0, got "
                                                f"{_show(timeout)}")
    known = data.get("known_hosts")
    return SSHConfig(
        user=_optional(data, "user", "ssh", _user), port=_port(data.get("port", 22), "ssh.port"),
        identity_file=_optional(data, "identity_file", "ssh", lambda v, k: _path(v, k, base)),
        connect_timeout_s=float(timeout),
        python=_python(data.get("python", "python3"), "ssh.python"),
        known_hosts=None if known is None else _path(known, "ssh.known_hosts", base))


def _parse_head(value: Any) -> HeadConfig:
    data = _table(value, "head", ("host", "resources", "labels"), required=("host",))
    host = _host(data["host"], "head.host")
    try:
        unspecified = ipaddress.ip_address(host.split("%")[0]).is_unspecified
    except ValueError:
        unspecified = False
    if unspecified:
        raise _Invalid("head.host", f"{host} is the wildcard address, which nodes cannot connect "
                       "to, and binding it would open the head's sockets on every interface; "
                       "give the head's address on the network the nodes share, e.g. 10.0.0.1")
    resources = None
    if "resources" in data:
        resources = _resources(data["resources"], "head.resources")
    elif "labels" in data:
        raise _Invalid("head.labels", "labels make the head a node that takes work, which needs "
                       "head.resources too (an empty table: detect them all)")
    labels = _labels(data.get("labels", []), "head.labels", resources or {})
    return HeadConfig(host=host, resources=resources, labels=labels)


def _parse_node(value: Any, key: str, base: Path) -> NodeConfig:
    data = _table(value, key, NODE_KEYS, required=("name", "host"))
    name = _string(data["name"], f"{key}.name", _NAME,
                   "a name of letters, digits, '-' and '_' (at most 64, no leading '-' or '_')")
    if name == HEAD:
        raise _Invalid(f"{key}.name", f"{HEAD!r} is the head's name among the scheduler's nodes; "
                       "give this node another")
    resources = _resources(data.get("resources", {}), f"{key}.resources")
    return NodeConfig(
        name=name, host=_host(data["host"], f"{key}.host"),
        port=_optional(data, "port", key, _port), user=_optional(data, "user", key, _user),
        identity_file=_optional(data, "identity_file", key, lambda v, k: _path(v, k, base)),
        python=_optional(data, "python", key, _python), resources=resources,
        labels=_labels(data.get("labels", []), f"{key}.labels", resources))


def _check_nodes(nodes: Sequence[NodeConfig], head: HeadConfig, ssh: SSHConfig) -> None:
    """Names and addresses are unique, and every node can reach the head."""
    if not nodes and not head.takes_work:
        raise _Invalid("nodes", "no nodes, and the head takes no work (it has no "
                       "head.resources): add a [[nodes]] entry, or give [head] resources")
    seen: dict[object, int] = {}
    for i, node in enumerate(nodes):
        for what, mark in (("name", node.name), ("host", (node.host, node.port or ssh.port))):
            if (what, mark) in seen:
                same = f" and port {node.port or ssh.port}" if what == "host" else ""
                raise _Invalid(f"nodes[{i}].{what}", f"{getattr(node, what)!r}{same} is also "
                               f"nodes[{seen[(what, mark)]}].{what}; each node needs its own")
            seen[(what, mark)] = i
    remote = [i for i, n in enumerate(nodes) if not _is_loopback(n.host)]
    if _is_loopback(head.host) and remote:
        i = remote[0]
        raise _Invalid("head.host", f"{head.host} is a loopback address, which nodes on other "
                       f"machines cannot reach (nodes[{i}].host is {nodes[i].host}); give the "
                       "head's address on the network the nodes share")


def _parse_sync(value: Any, key: str, base: Path) -> SyncEntry:
    data = _table(value, key, ("src", "dst", "exclude"), required=("src", "dst"))
    src = _path(data["src"], f"{key}.src", base)
    if not src.exists():
        raise _Invalid(f"{key}.src", f"no such file or folder: {src}")
    dst = _string(data["dst"], f"{key}.dst")
    if not dst or "\0" in dst or "\n" in dst:
        raise _Invalid(f"{key}.dst", f"expected a path on the nodes, got {_show(dst)}")
    exclude = _strings(data.get("exclude", list(DEFAULT_SYNC_EXCLUDE)), f"{key}.exclude")
    return SyncEntry(src=src, dst=dst, exclude=exclude)


def _parse_env(value: Any) -> Mapping[str, str]:
    data = _table(value, "env", None)
    for name, text in data.items():
        if not _ENV_NAME.match(name):
            raise _Invalid(_join("env", name), "not a valid environment variable name "
                           "(letters, digits and '_', not starting with a digit)")
        if not isinstance(text, str):
            raise _Invalid(_join("env", name), f"expected a string, got {_show(text)}; quote "
                           f"it: {name} = \"{_toml_text(text)}\"")
    return MappingProxyType(dict(data))


def _parse_security(value: Any) -> SecurityConfig:
    data = _table(value, "security", ("curve", "insecure_trusted_network"))
    curve = _boolean(data.get("curve", True), "security.curve")
    trusted = _boolean(data.get("insecure_trusted_network", False),
                       "security.insecure_trusted_network")
    if not curve and not trusted:
        raise _Invalid("security.curve", "false leaves every cluster socket unauthenticated and "
                       "unencrypted; where the network is trusted, say so with "
                       "security.insecure_trusted_network = true as well")
    return SecurityConfig(curve=curve, insecure_trusted_network=trusted)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False
