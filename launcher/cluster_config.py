"""The cluster file of ``rlmesh launch``: one TOML file with the nodes, how to reach them, what
to set up on them and the job to run, read into frozen dataclasses and checked key by key.
Also what a node offers (``detect_resources``, run on the node) and the hash of its setup."""

from __future__ import annotations

import copy
import difflib
import fnmatch
import hashlib
import ipaddress
import math
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, Mapping, Sequence

from rlmesh.launcher.scheduler import Node

if TYPE_CHECKING:
    from rlmesh.cli.train import TrainSpec

__all__ = ["BUILTIN_RESOURCES", "ClusterConfig", "ClusterConfigError", "HeadConfig", "JobConfig",
           "NodeConfig", "SSHConfig", "SSHTarget", "SecurityConfig", "SyncEntry", "config_hash",
           "detect_resources", "load_cluster", "parse_cluster"]

BUILTIN_RESOURCES = ("CPU", "GPU", "memory")  # detected on a node when the file leaves them out
HEAD = "head"  # the head's name among the scheduler's nodes; no [[nodes]] entry may take it
NODE_RESOURCE = "node:"  # every node offers "node:<name>" = 1, so a bundle can be pinned to it
STATE_ROOT = "~/.rlmesh/clusters"  # <root>/<cluster_name>/: known_hosts, keys, logs
DEFAULT_SYNC_EXCLUDE = (".git", "__pycache__", "*.pyc")
TOP_KEYS = ("cluster_name", "ssh", "head", "nodes", "setup_commands", "sync", "env", "security",
            "job")
SSH_KEYS = ("user", "identity_file", "port", "connect_timeout_s", "python", "known_hosts")
NODE_KEYS = ("name", "host", "port", "user", "identity_file", "python", "resources", "labels")
TRAIN_KEYS = ("run", "env", "config", "stop", "checkpoint_freq", "checkpoint_at_end", "local_dir",
              "experiment_name")
SCRIPT_KEYS = ("script", "args")

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}\Z")
# Hosts and users reach ssh's command line: a leading "-" would be read as an option there.
_HOST = re.compile(r"[A-Za-z0-9_:][A-Za-z0-9_.:%-]*\Z")
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\Z")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+\Z")
_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")


class ClusterConfigError(ValueError):
    """A cluster file that cannot be used: the message names the file, the key (a dotted path
    such as ``nodes[2].resources.GPU``) and what was expected there."""

    def __init__(self, message: str, *, source: str = "", key: str = "") -> None:
        super().__init__(": ".join(p for p in (source, key, message) if p))
        self.source, self.key, self.reason = source, key, message


class _Invalid(Exception):
    """Raised by the readers below; parse_cluster adds the file's name."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(reason)
        self.key, self.reason = key, reason


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
class JobConfig:
    """``[job]``: a ``rlmesh train -f`` experiment (kind "train") or a script run on the head
    against the cluster (kind "script")."""

    kind: Literal["train", "script"]
    run: str | None = None  # the algorithm's canonical name ("PPO")
    env: str | None = None
    config: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))  # + env
    stop: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    checkpoint_freq: int = 0
    checkpoint_at_end: bool = False
    local_dir: str | None = None
    experiment_name: str | None = None
    script: Path | None = None  # absolute
    args: tuple[str, ...] = ()

    def train_spec(self) -> TrainSpec:
        """The experiment as ``rlmesh train`` runs it."""
        from rlmesh.cli.train import DEFAULT_STOP, TrainSpec

        if self.kind != "train" or self.run is None:
            raise ValueError("a script job has no train spec; run its script instead")
        return TrainSpec(run=self.run, env=self.env, config=copy.deepcopy(dict(self.config)),
                         stop=dict(self.stop or DEFAULT_STOP), experiment=self.experiment_name,
                         local_dir=self.local_dir, checkpoint_freq=self.checkpoint_freq,
                         checkpoint_at_end=self.checkpoint_at_end)


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
    data = _table(data, "", TOP_KEYS, required=("cluster_name", "head", "job"))
    name = _string(data["cluster_name"], "cluster_name", _NAME,
                   "a name of letters, digits, '-' and '_' (at most 64, no leading '-' or '_')")
    ssh = _parse_ssh(data.get("ssh", {}), base)
    head = _parse_head(data["head"])
    nodes = tuple(_parse_node(entry, f"nodes[{i}]", base)
                  for i, entry in enumerate(_array(data.get("nodes", []), "nodes")))
    _check_nodes(nodes, head, ssh)
    commands = _strings(data.get("setup_commands", []), "setup_commands")
    sync = tuple(_parse_sync(entry, f"sync[{i}]", base)
                 for i, entry in enumerate(_array(data.get("sync", []), "sync")))
    return ClusterConfig(
        cluster_name=name, head=head, job=_parse_job(data["job"], base), nodes=nodes, ssh=ssh,
        setup_commands=commands, sync=sync, env=_parse_env(data.get("env", {})),
        security=_parse_security(data.get("security", {})), source=source)


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


# --- the job -----------------------------------------------------------------------------------

def _parse_job(value: Any, base: Path) -> JobConfig:
    data = _table(value, "job", TRAIN_KEYS + SCRIPT_KEYS)
    train = [k for k in TRAIN_KEYS if k in data]
    if "script" in data and train:
        raise _Invalid("job", f"give either script (a Python script run on the head) or run, "
                       f"env, config, stop (an experiment, as in `rlmesh train -f`), not both; "
                       f"found script and {', '.join(train)}")
    if "script" in data:
        script = _path(data["script"], "job.script", base)
        if not script.is_file():
            raise _Invalid("job.script", f"no such file: {script}")
        return JobConfig(kind="script", script=script, args=_strings(data.get("args", []),
                                                                     "job.args"))
    if "args" in data:
        raise _Invalid("job.args", "args go with job.script; an experiment (run) takes none")
    if "run" not in data:
        from rlmesh.cli.train import ALGORITHMS

        raise _Invalid("job.run", f"missing: give run (an algorithm: {', '.join(ALGORITHMS)}) "
                       "with env, config and stop, or script (a Python script run on the head)")
    return _parse_experiment(data)


def _parse_experiment(data: dict[str, Any]) -> JobConfig:
    """An experiment, checked as ``rlmesh train`` will build it: so a typo in its config fails
    here, before any node is touched."""
    from rlmesh.algorithms.settings import ConfigError
    from rlmesh.cli.train import ALGORITHMS, UsageError, canonical_keys, config_class, parse_stop

    run = _string(data["run"], "job.run")
    try:
        cls = config_class(run)
    except UsageError as e:
        raise _Invalid("job.run", str(e)) from None
    run = next(n for n in ALGORITHMS if n.lower() == run.lower())
    config = canonical_keys(cls, dict(_table(data.get("config", {}), "job.config", None)))
    env = data.get("env", config.get("env"))
    if env is None:
        raise _Invalid("job.env", "missing: give the environment (a gymnasium id, or "
                       "'pkg.module:make_env'), here or as job.config.env")
    env = _string(env, "job.env" if "env" in data else "job.config.env")
    config["env"] = env
    try:
        cls.from_dict(config).validate()
    except ConfigError as e:
        raise _Invalid("job.config", str(e).replace("invalid config:\n  ", "")
                       .replace("\n  ", "; ")) from None
    try:
        stop = parse_stop(_table(data.get("stop", {}), "job.stop", None), "job.stop")
    except UsageError as e:
        raise _Invalid("job.stop", str(e).removeprefix("job.stop: ")) from None
    freq = data.get("checkpoint_freq", 0)
    if isinstance(freq, bool) or not isinstance(freq, int) or freq < 0:
        raise _Invalid("job.checkpoint_freq", f"expected an integer >= 0 (iterations between "
                       f"checkpoints; 0: none), got {_show(freq)}")
    return JobConfig(
        kind="train", run=run, env=env, config=MappingProxyType(config),
        stop=MappingProxyType(stop), checkpoint_freq=freq,
        checkpoint_at_end=_boolean(data.get("checkpoint_at_end", False), "job.checkpoint_at_end"),
        local_dir=_optional(data, "local_dir", "job", _string),
        experiment_name=_optional(data, "experiment_name", "job", _folder_name))


# --- readers of one value: each returns it checked, or raises _Invalid naming its key ----------

def _join(key: str, name: str) -> str:
    name = name if _BARE_KEY.match(name) else f'"{name}"'
    return f"{key}.{name}" if key else name


def _show(value: Any) -> str:
    kind = {bool: "a boolean", int: "an integer", float: "a float", str: "a string",
            list: "an array", dict: "a table"}.get(type(value), type(value).__name__)
    if isinstance(value, (list, dict)):
        return kind
    text = repr(value)
    return f"{text if len(text) <= 60 else text[:57] + '...'} ({kind})"


def _toml_text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _hint(key: str, allowed: Sequence[str]) -> str:
    near = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    return f"; did you mean {near[0]!r}?" if near else f"; expected one of {', '.join(allowed)}"


def _table(value: Any, key: str, allowed: Sequence[str] | None,
           required: Sequence[str] = ()) -> dict[str, Any]:
    """``value`` as a table whose keys are among ``allowed`` (None: any) and include
    ``required``."""
    if not isinstance(value, dict):
        raise _Invalid(key or "(top level)", f"expected a table, got {_show(value)}")
    for name in value:
        if allowed is not None and name not in allowed:
            hint = _hint(name, allowed)
            if key and name in TOP_KEYS:  # TOML's trap: a key after [table] belongs to it
                hint = (f"; {name} is a top-level key, which TOML reads as one only before "
                        "the first [table] header: move it up")
            raise _Invalid(_join(key, name), "unknown key" + hint)
    for name in required:
        if name not in value:
            raise _Invalid(_join(key, name), "missing, and required" + _misplaced(value, name))
    return value


def _misplaced(data: dict[str, Any], name: str) -> str:
    """Where a missing top-level key sits instead: under the table whose header precedes it."""
    for table, value in data.items():
        last = value[-1] if isinstance(value, list) and value else value
        if isinstance(last, dict) and name in last:
            where = f"[[{table}]]" if isinstance(value, list) else f"[{table}]"
            return (f"; there is one under {where}, but TOML reads a key after a [table] "
                    "header as that table's: move it above the first header")
    return ""


def _array(value: Any, key: str) -> list[Any]:
    if not isinstance(value, list):
        raise _Invalid(key, f"expected an array (as [[{key}]] tables), got {_show(value)}")
    return value


def _optional(data: dict[str, Any], name: str, key: str, read: Any) -> Any:
    return read(data[name], _join(key, name)) if name in data else None


def _string(value: Any, key: str, pattern: re.Pattern[str] | None = None,
            expected: str = "a string") -> str:
    if not isinstance(value, str) or (pattern is not None and not pattern.match(value)):
        raise _Invalid(key, f"expected {expected}, got {_show(value)}")
    return value


def _strings(value: Any, key: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise _Invalid(key, f"expected an array of strings, got {_show(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            raise _Invalid(f"{key}[{i}]", f"expected a non-empty string, got {_show(item)}")
    return tuple(value)


def _boolean(value: Any, key: str) -> bool:
    if not isinstance(value, bool):
        raise _Invalid(key, f"expected true or false, got {_show(value)}")
    return value


def _port(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise _Invalid(key, f"expected a port number from 1 to 65535, got {_show(value)}")
    return value


def _host(value: Any, key: str) -> str:
    return _string(value, key, _HOST, "a host name or an IP address")


def _user(value: Any, key: str) -> str:
    return _string(value, key, _USER, "a user name (letters, digits, '.', '-', '_')")


def _python(value: Any, key: str) -> str:
    if not isinstance(value, str) or not value.strip() or "\n" in value or "\0" in value:
        raise _Invalid(key, f"expected the command of a Python interpreter on the nodes, e.g. "
                       f"'python3' or '/opt/venv/bin/python', got {_show(value)}")
    return value


def _folder_name(value: Any, key: str) -> str:
    text = _string(value, key)
    if not text or "/" in text or "\\" in text or "\0" in text or text in (".", ".."):
        raise _Invalid(key, f"expected a folder name (no '/'), got {_show(value)}")
    return text


def _path(value: Any, key: str, base: Path) -> Path:
    text = _string(value, key)
    if not text or "\0" in text:
        raise _Invalid(key, f"expected a path, got {_show(value)}")
    path = Path(text).expanduser()
    return path if path.is_absolute() else base / path


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def _resources(value: Any, key: str) -> Mapping[str, float]:
    """A resources table: amounts >= 0, whole GPUs, and no name that only looks built in."""
    data = _table(value, key, None)
    lowered = {r.lower(): r for r in BUILTIN_RESOURCES}
    out: dict[str, float] = {}
    for name, amount in data.items():
        at = _join(key, name)
        _check_resource_name(name, at, lowered)
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) \
                or not math.isfinite(amount) or amount < 0:
            raise _Invalid(at, f"expected a number >= 0, got {_show(amount)}")
        if name == "GPU" and amount != int(amount):
            raise _Invalid(at, f"expected a whole number of GPUs (bundles may ask for "
                           f"fractions of one, a node has whole ones), got {amount}")
        out[name] = float(amount)
    return MappingProxyType(out)


def _check_resource_name(name: str, key: str, lowered: Mapping[str, str]) -> None:
    if name.startswith(NODE_RESOURCE):
        raise _Invalid(key, f"names starting with {NODE_RESOURCE!r} are taken: every node "
                       f"offers {NODE_RESOURCE}<its name> = 1")
    if name in BUILTIN_RESOURCES:
        return
    # Resource names are case-sensitive: a "gpus" would be a custom resource no bundle asks.
    near = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.75)
    if near:
        raise _Invalid(key, f"unknown resource {name!r}; did you mean {lowered[near[0]]!r}? "
                       "(names are case-sensitive; custom ones must not look like "
                       f"{', '.join(BUILTIN_RESOURCES)})")


def _labels(value: Any, key: str, resources: Mapping[str, float]) -> tuple[str, ...]:
    labels = _strings(value, key)
    lowered = {r.lower(): r for r in BUILTIN_RESOURCES}
    for i, label in enumerate(labels):
        _check_resource_name(label, f"{key}[{i}]", lowered)
        if label in BUILTIN_RESOURCES:
            raise _Invalid(f"{key}[{i}]", f"{label!r} is a built-in resource; set it under "
                           "resources instead")
        if label in resources:
            raise _Invalid(f"{key}[{i}]", f"{label!r} is also given under resources; keep one")
        if label in labels[:i]:
            raise _Invalid(f"{key}[{i}]", f"{label!r} is given twice")
    return labels


# --- the setup hash ----------------------------------------------------------------------------

def config_hash(commands: Sequence[str], sync: Sequence[SyncEntry]) -> str:
    """A hex digest of the setup commands and of what ``sync`` copies: each entry's ``dst``,
    and its files' relative paths, contents and executable bits (a symlink: its target).
    Where ``src`` lies on the head, and modification times, do not count."""
    digest = hashlib.sha256(b"rlmesh-setup-v1")
    _feed(digest, "commands", str(len(commands)), *commands)
    for entry in sync:
        _feed(digest, "sync", entry.dst)
        for rel, path in entry.files():
            if path.is_symlink():
                _feed(digest, "link", rel, os.readlink(path))
            else:
                executable = os.stat(path).st_mode & 0o111 != 0
                _feed(digest, "file", rel, str(executable), _file_digest(path))
    return digest.hexdigest()


def _feed(digest: Any, *parts: str) -> None:
    for part in parts:  # length-prefixed, so ("ab", "c") and ("a", "bc") differ
        data = part.encode("utf-8", "surrogateescape")
        digest.update(len(data).to_bytes(8, "big") + data)


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


# --- what a node offers ------------------------------------------------------------------------

def detect_resources() -> dict[str, float]:
    """CPU, GPU and memory (bytes) of this machine, as the node agent reports them."""
    import psutil

    cpus = psutil.cpu_count() or 1
    if hasattr(os, "sched_getaffinity"):  # a container or taskset may give us fewer
        cpus = min(cpus, len(os.sched_getaffinity(0)) or cpus)
    return {"CPU": float(cpus), "GPU": float(_count_gpus()),
            "memory": float(psutil.virtual_memory().total)}


def _count_gpus() -> int:
    """nvidia-smi's count, else torch's if torch is already imported (importing it here would
    cost seconds), else 0: a machine without either has no GPU we could use."""
    smi = shutil.which("nvidia-smi")
    if smi is not None:
        try:
            done = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20,
                                  check=False)
        except (OSError, subprocess.SubprocessError):
            done = None
        if done is not None and done.returncode == 0:
            listed = sum(1 for line in done.stdout.splitlines() if line.startswith("GPU "))
            return _visible(listed, os.environ.get("CUDA_VISIBLE_DEVICES"))
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            return int(torch.cuda.device_count())  # it reads CUDA_VISIBLE_DEVICES itself
        except Exception:  # a broken CUDA install: the node still runs CPU work
            return 0
    return 0


def _visible(listed: int, cuda_visible: str | None) -> int:
    """The GPUs CUDA will show, of ``listed``: CUDA_VISIBLE_DEVICES, when set, keeps those
    named before its first empty or negative entry."""
    if cuda_visible is None:
        return listed
    count = 0
    for entry in cuda_visible.split(","):
        entry = entry.strip()
        if not entry or entry.startswith("-"):
            break
        count += 1
    return min(listed, count)
