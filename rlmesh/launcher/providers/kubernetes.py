"""The Kubernetes provider: a cluster file's ``[kubernetes]`` table, and the manifests that run
its job as pods (``rlmesh launch --render k8s cluster.toml``).

No rlmesh process talks to the Kubernetes API. The renderer writes four objects, and
``kubectl apply`` (or any GitOps tool) does the rest:

* a ``Secret`` with the cluster's CURVE key pair, mounted read-only (0400) in every pod, so
  every pod's sockets are authenticated and encrypted as under SSH;
* a ``ConfigMap`` holding the cluster file itself, so pod 0 runs the same job the user wrote;
* a headless ``Service`` (no cluster IP; addresses published before the pods are ready): it
  gives pod ``i`` the DNS name ``<job>-<i>.<service>``, which is how agents find the head;
* an Indexed ``batch/v1 Job`` of ``nodes`` pods, all started at once. Each runs
  ``rlmesh node --from-env``: pod 0 (``JOB_COMPLETION_INDEX`` = 0, set by Kubernetes) is the
  head and runs the job; the others dial the head's join port at ``<job>-0.<service>``.

How the Job ends is chosen so that Kubernetes does what the head would do anyway:
``successPolicy`` makes the head's index the Job's success (the head finishing ends the job,
and Kubernetes stops the agents left), and ``backoffLimitPerIndex = 0`` with
``maxFailedIndexes = nodes - 1`` lets an agent's pod fail (evicted, its node drained) without
failing the Job: the head sees a lost node, as it does for an SSH node, and places its work
again. A plain ``backoffLimit = 0`` would have ended every pod at the first eviction. Both
fields are GA from Kubernetes 1.33 (beta before: 1.29 and 1.31), which is what the
manifests are validated against (tests/unit/test_k8s_manifests.py).

Every pod has the same resources, so the head knows each node's CPUs, GPUs and memory from
this table (``KubernetesConfig.pod_resources``) rather than from what the pod's process
sees, which in a container is the whole machine's CPUs and memory.

Names are DNS-1123 labels derived from ``cluster_name`` (lower case, "_" -> "-", a leading
digit prefixed with "rlmesh-"); a name too long for a pod's host name is refused.

Bad input is one line: a key of the table with what was expected there (as the rest of the
cluster file), or, when rendering, a pod shape the job cannot use (GPUs nobody asks for, a
bundle larger than a pod).
"""

from __future__ import annotations

import base64
import copy
import math
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from rlmesh.launcher.cluster_values import (_array, _Invalid, _join, _port, _python, _show,
                                            _string, _table)

if TYPE_CHECKING:
    from rlmesh.launcher.cluster_job import JobConfig

__all__ = ["CLUSTER_FILE", "CURVE_DIR", "KEY_PLACEHOLDER", "KUBERNETES_KEYS", "KubernetesConfig",
           "KubernetesError", "Names", "Toleration", "check_job_fits", "dump_manifests",
           "names_for", "parse_kubernetes", "placeholder_keys", "pod_env", "quantity", "render",
           "render_file", "render_path", "resource_names", "write_manifests"]

KUBERNETES_KEYS = ("image", "namespace", "nodes", "cpu", "memory", "gpus", "join_port",
                   "image_pull_policy", "service_account", "node_selector", "tolerations",
                   "python", "ttl_seconds_after_finished", "labels")
TOLERATION_KEYS = ("key", "operator", "value", "effect", "toleration_seconds")

# Where a pod finds the cluster file and the keys (the ConfigMap's and the Secret's mounts).
CLUSTER_MOUNT = "/etc/rlmesh/cluster"
CLUSTER_FILE_NAME = "cluster.toml"
CLUSTER_FILE = f"{CLUSTER_MOUNT}/{CLUSTER_FILE_NAME}"
CURVE_DIR = "/etc/rlmesh/curve"
# The environment variables `rlmesh node --from-env` reads (JOB_COMPLETION_INDEX is
# Kubernetes' own, set in every pod of an Indexed Job).
ENV_CLUSTER_FILE = "RLMESH_CLUSTER_FILE"
ENV_HEAD_HOST = "RLMESH_HEAD_HOST"
ENV_JOIN_PORT = "RLMESH_JOIN_PORT"
ENV_INDEX = "JOB_COMPLETION_INDEX"
GPU_RESOURCE = "nvidia.com/gpu"
RENDERED_HEADER = """\
Rendered by `rlmesh launch --render k8s {source}`;
apply it with `kubectl apply -f <this file>`. The Secret holds the cluster's CURVE secret key: keep this file private, do not commit it."""
KEY_PLACEHOLDER = "<rendered at launch: rlmesh launch --render k8s makes a new key pair>"
CONFIG_MAP_LIMIT = 1 << 20  # bytes: the API server refuses a larger ConfigMap

# The labels rlmesh puts on every object; the Service selects the pods by them.
NAME_LABEL, INSTANCE_LABEL = "app.kubernetes.io/name", "app.kubernetes.io/instance"
COMPONENT_LABEL = "app.kubernetes.io/component"

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?\Z")
# A Kubernetes quantity as the API writes it: a decimal number with an SI or binary suffix,
# or an exponent. "m" (milli) is legal for memory too, but means thousandths of a byte.
_QUANTITY = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?\d+)?\Z")
_SUFFIX = {"": 1.0, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
           "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50,
           "Ei": 2.0**60}
_PULL_POLICIES = ("IfNotPresent", "Always", "Never")
_OPERATORS = ("Equal", "Exists")
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


class KubernetesError(ValueError):
    """A manifest that cannot be rendered: one line, naming the cluster file and the key."""


@dataclass(frozen=True)
class Toleration:
    """One ``[[kubernetes.tolerations]]`` entry, as a pod's toleration."""

    key: str | None = None
    operator: str = "Equal"
    value: str | None = None
    effect: str | None = None
    toleration_seconds: int | None = None

    def manifest(self) -> dict[str, Any]:
        out: dict[str, Any] = {"operator": self.operator}
        for name, value in (("key", self.key), ("value", self.value), ("effect", self.effect),
                            ("tolerationSeconds", self.toleration_seconds)):
            if value is not None:
                out[name] = value
        return out


@dataclass(frozen=True)
class KubernetesConfig:
    """``[kubernetes]``: the pods a job runs in, all alike (pod 0 is also the head)."""

    image: str  # an image with rlmesh installed (and the job's env packages)
    nodes: int  # pods, the head's among them
    namespace: str = "default"
    cpu: str = "2"  # a Kubernetes quantity, requested and the limit
    memory: str = "4Gi"
    gpus: int = 0  # nvidia.com/gpu per pod
    join_port: int = 29400  # the head's join socket
    image_pull_policy: str = "IfNotPresent"
    service_account: str | None = None  # None: the namespace's default, without its token
    node_selector: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    tolerations: tuple[Toleration, ...] = ()
    python: str = "python3"  # the interpreter in the image that has rlmesh
    ttl_seconds_after_finished: int | None = None  # None: the finished Job stays
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def pod_resources(self) -> dict[str, float]:
        """What each pod offers the scheduler: its limits (a container sees the whole
        machine's CPUs and memory, not its share)."""
        return {"CPU": quantity(self.cpu), "GPU": float(self.gpus),
                "memory": quantity(self.memory)}


@dataclass(frozen=True)
class Names:
    """The objects' names, and the head's DNS name inside the namespace."""

    job: str
    service: str
    config_map: str
    secret: str

    @property
    def head_host(self) -> str:
        return self.pod_host(0)

    def pod_host(self, index: int) -> str:
        """Pod ``index``'s name in the namespace's DNS (``<host>.<service>``)."""
        return f"{self.job}-{index}.{self.service}"

    def hostname(self, index: int) -> str:
        """Pod ``index``'s host name, as Kubernetes sets it for an Indexed Job's pod."""
        return f"{self.job}-{index}"


# --- the table ---------------------------------------------------------------------------------

def parse_kubernetes(value: Any, key: str = "kubernetes") -> KubernetesConfig:
    """``value`` (the parsed ``[kubernetes]`` table) checked key by key; raises _Invalid."""
    data = _table(value, key, KUBERNETES_KEYS, required=("image", "nodes"))

    def at(name: str) -> str:
        return _join(key, name)

    image = _string(data["image"], at("image"))
    if not image.strip() or any(c.isspace() for c in image):
        raise _Invalid(at("image"), f"expected an image reference such as "
                       f"'ghcr.io/you/rlmesh:0.1', got {_show(image)}")
    defaults = KubernetesConfig(image="", nodes=1)
    namespace = _dns(data.get("namespace", defaults.namespace), at("namespace"), _DNS_LABEL, 63,
                     "a namespace name (lower-case letters, digits and '-', at most 63)")
    policy = _string(data.get("image_pull_policy", defaults.image_pull_policy),
                     at("image_pull_policy"))
    if policy not in _PULL_POLICIES:
        raise _Invalid(at("image_pull_policy"), f"expected one of {', '.join(_PULL_POLICIES)}, "
                       f"got {_show(policy)}")
    account = None
    if "service_account" in data:
        account = _dns(data["service_account"], at("service_account"), _DNS_SUBDOMAIN, 253,
                       "a service account name (lower-case letters, digits, '-' and '.')")
    labels = _label_table(data.get("labels", {}), at("labels"))
    taken = sorted(set(labels) & {NAME_LABEL, INSTANCE_LABEL, COMPONENT_LABEL})
    if taken:
        raise _Invalid(_join(at("labels"), taken[0]), "rlmesh sets this label itself (the "
                       "Service finds the pods by it); use another key")
    return KubernetesConfig(
        image=image, nodes=_count(data["nodes"], at("nodes"), 1, "pods (the head's included)"),
        namespace=namespace,
        cpu=_quantity(data.get("cpu", defaults.cpu), at("cpu"), "CPUs, e.g. '2' or '500m'"),
        memory=_quantity(data.get("memory", defaults.memory), at("memory"),
                         "bytes, e.g. '4Gi' or '512Mi'"),
        gpus=_count(data.get("gpus", 0), at("gpus"), 0, f"{GPU_RESOURCE} per pod"),
        join_port=_port(data.get("join_port", defaults.join_port), at("join_port")),
        image_pull_policy=policy, service_account=account,
        node_selector=_label_table(data.get("node_selector", {}), at("node_selector")),
        tolerations=tuple(_toleration(t, f"{at('tolerations')}[{i}]")
                          for i, t in enumerate(_array(data.get("tolerations", []),
                                                       at("tolerations")))),
        python=_python(data.get("python", defaults.python), at("python")),
        ttl_seconds_after_finished=None if "ttl_seconds_after_finished" not in data else _count(
            data["ttl_seconds_after_finished"], at("ttl_seconds_after_finished"), 0,
            "seconds the finished Job is kept"),
        labels=labels)


def quantity(text: str) -> float:
    """A Kubernetes quantity's value ("500m" -> 0.5, "4Gi" -> 4294967296.0)."""
    match = _QUANTITY.match(text)
    if match is None:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    number, suffix = match[1], match[2] or ""
    if suffix[:1] in ("e", "E"):
        return float(number + suffix)
    return float(number) * _SUFFIX[suffix]


def _quantity(value: Any, key: str, what: str) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        value = f"{value:g}" if isinstance(value, float) else str(value)
    if not isinstance(value, str) or not _QUANTITY.match(value) or quantity(value) <= 0:
        raise _Invalid(key, f"expected a Kubernetes quantity > 0 of {what}, got {_show(value)}")
    if key.endswith("memory") and value.endswith("m"):
        raise _Invalid(key, f"{value!r} is {value[:-1]} thousandths of a byte ('m' is milli); "
                       f"did you mean {value[:-1] + 'Mi'!r}?")
    if key.endswith("cpu") and not re.fullmatch(r"[\d.]+m?", value):
        raise _Invalid(key, f"expected CPUs as a number or millicores, e.g. '2' or '500m', "
                       f"got {_show(value)}")
    return value


def _count(value: Any, key: str, least: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise _Invalid(key, f"expected an integer >= {least} ({what}), got {_show(value)}")
    return value


def _dns(value: Any, key: str, pattern: re.Pattern[str], longest: int, what: str) -> str:
    text = _string(value, key)
    if len(text) > longest or not pattern.match(text):
        raise _Invalid(key, f"expected {what}, got {_show(text)}")
    return text


def _label_table(value: Any, key: str) -> Mapping[str, str]:
    """Kubernetes labels (or a node selector): keys ``[prefix/]name``, string values."""
    data = _table(value, key, None)
    for name, text in data.items():
        at = _join(key, name)
        prefix, _, short = name.rpartition("/")
        if (prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix))) \
                or len(short) > 63 or not _LABEL_NAME.match(short):
            raise _Invalid(at, "not a Kubernetes label key ([prefix/]name: a name of at most 63 "
                           "letters, digits, '-', '_', '.', starting and ending alphanumeric)")
        if not isinstance(text, str):
            raise _Invalid(at, f"expected a string, got {_show(text)}; quote it: "
                           f"\"{name}\" = \"{text}\"")
        if text and (len(text) > 63 or not _LABEL_NAME.match(text)):
            raise _Invalid(at, f"expected a label value (at most 63 letters, digits, '-', '_', "
                           f"'.', starting and ending alphanumeric), got {_show(text)}")
    return MappingProxyType(dict(data))


def _toleration(value: Any, key: str) -> Toleration:
    data = _table(value, key, TOLERATION_KEYS)
    operator = _string(data.get("operator", "Equal"), _join(key, "operator"))
    if operator not in _OPERATORS:
        raise _Invalid(_join(key, "operator"), f"expected Equal or Exists, got {_show(operator)}")
    effect = None
    if "effect" in data:
        effect = _string(data["effect"], _join(key, "effect"))
        if effect not in _EFFECTS:
            raise _Invalid(_join(key, "effect"), f"expected one of {', '.join(_EFFECTS)}, got "
                           f"{_show(effect)}")
    if operator == "Exists" and "value" in data:
        raise _Invalid(_join(key, "value"), "operator Exists takes no value")
    if operator == "Equal" and "key" not in data:
        raise _Invalid(_join(key, "key"), "missing: operator Equal needs a key (without one, "
                       "use operator = \"Exists\" to tolerate every taint)")
    seconds = None
    if "toleration_seconds" in data:
        if effect != "NoExecute":
            raise _Invalid(_join(key, "toleration_seconds"), "only a NoExecute toleration "
                           "takes toleration_seconds")
        seconds = _count(data["toleration_seconds"], _join(key, "toleration_seconds"), 0,
                         "seconds the pod stays after the taint")
    return Toleration(
        key=None if "key" not in data else _string(data["key"], _join(key, "key")),
        operator=operator, effect=effect, toleration_seconds=seconds,
        value=None if "value" not in data else _string(data["value"], _join(key, "value")))


# --- names -------------------------------------------------------------------------------------

def names_for(cluster_name: str, nodes: int, source: str = "<cluster>") -> Names:
    """The objects' names for ``cluster_name``: a DNS label that also starts with a letter (a
    Service's name must), short enough that pod ``nodes - 1``'s host name fits in 63."""
    base = cluster_name.lower().replace("_", "-").strip("-")
    if base[:1].isdigit():
        base = f"rlmesh-{base}"
    room = 63 - len(f"-{max(nodes - 1, 0)}")
    if not base or not _DNS_LABEL.match(base) or len(base) > room:
        raise KubernetesError(
            f"{source}: cluster_name: {cluster_name!r} cannot name the Kubernetes objects: as a "
            f"DNS label it is {base!r}, and the host name of pod {nodes - 1} "
            f"({base}-{nodes - 1}) must be at most 63 characters; use a name of at most "
            f"{room} letters, digits and '-'")
    return Names(job=base, service=base, config_map=f"{base}-cluster", secret=f"{base}-curve")


def resource_names(cluster_name: str, nodes: int = 1) -> tuple[str, str]:
    """(the Job's name, the Service's name) for ``cluster_name``: pod ``i`` is
    ``<job>-<i>``, reached as ``<job>-<i>.<service>``."""
    names = names_for(cluster_name, nodes)
    return names.job, names.service


# --- the manifests ----------------------------------------------------------------------------

def render(cluster_config_text: str, cluster_name: str, k: KubernetesConfig,
           keys_dir: str | os.PathLike[str] | None = None, *, job: JobConfig | None = None,
           source: str = "<cluster>") -> list[dict[str, Any]]:
    """The manifests (Secret, ConfigMap, Service, Job) running ``cluster_config_text`` on
    ``k.nodes`` pods. The CURVE keys are those in ``keys_dir`` (made there if it has none),
    else a new pair made in a temporary folder and not kept. With ``job`` (the file's
    ``[job]``), a pod shape the job cannot use is refused (KubernetesError, one line)."""
    names = names_for(cluster_name, k.nodes, source)
    if job is not None:
        check_job_fits(job, k, source, names)
    size = len(cluster_config_text.encode("utf-8"))
    if size > CONFIG_MAP_LIMIT:
        raise KubernetesError(f"{source}: the cluster file is {size} bytes; a ConfigMap holds at "
                              f"most {CONFIG_MAP_LIMIT} (1 MiB)")
    labels = {**k.labels, NAME_LABEL: "rlmesh", INSTANCE_LABEL: names.job}

    def meta(name: str) -> dict[str, Any]:
        return {"name": name, "namespace": k.namespace, "labels": dict(labels)}

    return [
        {"apiVersion": "v1", "kind": "Secret", "metadata": meta(names.secret),
         "type": "Opaque", "data": _key_files(keys_dir)},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(names.config_map),
         "data": {CLUSTER_FILE_NAME: cluster_config_text}},
        {"apiVersion": "v1", "kind": "Service", "metadata": meta(names.service),
         "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                  "selector": {NAME_LABEL: "rlmesh", INSTANCE_LABEL: names.job},
                  "ports": [{"name": "join", "port": k.join_port, "targetPort": k.join_port,
                             "protocol": "TCP"}]}},
        _job(names, k, labels),
    ]


def _key_files(keys_dir: str | os.PathLike[str] | None) -> dict[str, str]:
    """The key pair's two files, base64 as a Secret's data holds them."""
    from rlmesh.wire.security import PUBLIC, SECRET, make_cluster_keys

    def read(root: Path) -> dict[str, str]:
        make_cluster_keys(root)
        return {name: base64.b64encode((root / name).read_bytes()).decode("ascii")
                for name in (PUBLIC, SECRET)}

    if keys_dir is not None:
        return read(Path(keys_dir))
    with tempfile.TemporaryDirectory(prefix="rlmesh-k8s-keys-") as tmp:
        return read(Path(tmp) / "keys")


def _job(names: Names, k: KubernetesConfig, labels: dict[str, str]) -> dict[str, Any]:
    limits: dict[str, Any] = {"cpu": k.cpu, "memory": k.memory}
    if k.gpus:
        limits[GPU_RESOURCE] = k.gpus
    container = {
        "name": "rlmesh", "image": k.image, "imagePullPolicy": k.image_pull_policy,
        "command": [k.python, "-m", "rlmesh", "node", "--from-env"],
        "env": [{"name": n, "value": v} for n, v in _manifest_env(names, k).items()],
        "ports": [{"name": "join", "containerPort": k.join_port, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": k.cpu, "memory": k.memory}, "limits": limits},
        "volumeMounts": [
            {"name": "cluster-file", "mountPath": CLUSTER_MOUNT, "readOnly": True},
            {"name": "curve-keys", "mountPath": CURVE_DIR, "readOnly": True},
            {"name": "shm", "mountPath": "/dev/shm"}],
    }
    pod: dict[str, Any] = {
        "subdomain": names.service, "restartPolicy": "Never",
        # Only the Service's DNS names: no environment variables for every Service around.
        "enableServiceLinks": False,
    }
    if k.service_account is not None:
        pod["serviceAccountName"] = k.service_account
    else:  # rlmesh never calls the API server: no token in the pod
        pod["automountServiceAccountToken"] = False
    if k.node_selector:
        pod["nodeSelector"] = dict(k.node_selector)
    if k.tolerations:
        pod["tolerations"] = [t.manifest() for t in k.tolerations]
    pod["containers"] = [container]
    pod["volumes"] = [
        {"name": "cluster-file", "configMap": {"name": names.config_map}},
        {"name": "curve-keys", "secret": {"secretName": names.secret, "defaultMode": 0o400}},
        # A container's /dev/shm is 64 MiB; torch's and rlmesh's shared memory need more.
        {"name": "shm", "emptyDir": {"medium": "Memory"}}]
    spec: dict[str, Any] = {
        "completionMode": "Indexed", "completions": k.nodes, "parallelism": k.nodes,
        "backoffLimitPerIndex": 0, "maxFailedIndexes": k.nodes - 1,
        "successPolicy": {"rules": [{"succeededIndexes": "0"}]},
    }
    if k.ttl_seconds_after_finished is not None:
        spec["ttlSecondsAfterFinished"] = k.ttl_seconds_after_finished
    spec["template"] = {"metadata": {"labels": {**labels, COMPONENT_LABEL: "node"}},
                        "spec": pod}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": names.job, "namespace": k.namespace, "labels": dict(labels)},
            "spec": spec}


def _manifest_env(names: Names, k: KubernetesConfig) -> dict[str, str]:
    from rlmesh.wire.security import ENV_CURVE_DIR

    return {ENV_CLUSTER_FILE: CLUSTER_FILE, ENV_HEAD_HOST: names.head_host,
            ENV_JOIN_PORT: str(k.join_port), ENV_CURVE_DIR: CURVE_DIR}


def pod_env(names: Names, k: KubernetesConfig, index: int) -> dict[str, str]:
    """The variables pod ``index`` has beyond its image's own: the manifest's, and those
    Kubernetes adds (the completion index; the host name, which the runtime sets)."""
    return {**_manifest_env(names, k), ENV_INDEX: str(index), "HOSTNAME": names.hostname(index)}


# --- does the job fit the pods -----------------------------------------------------------------

def check_job_fits(job: JobConfig, k: KubernetesConfig, source: str = "<cluster>",
                   names: Names | None = None) -> None:
    """Refuse pods the job cannot use, in one line: GPUs when it asks none, a bundle asking more
    GPUs than a pod has, or a placement that does not fit ``k.nodes`` such pods. A script job
    says nothing of its placement in the file: nothing to check."""
    if job.kind != "train" or job.run is None:
        return
    from rlmesh.launcher.cluster_job import _one_sample
    from rlmesh.placement.scheduler import Node, PlacementError, place
    from rlmesh.tune.experiment import config_class

    groups = config_class(job.run).from_dict(_one_sample(dict(job.config))).resource_request()
    bundles = [b for g in groups for b in g.bundles]
    asked = {b.label: float(b.resources.get("GPU", 0)) for b in bundles}
    if k.gpus and not any(asked.values()):
        raise KubernetesError(
            f"{source}: kubernetes.gpus = {k.gpus} but the job uses no GPU (num_gpus_per_learner "
            f"and num_gpus_per_env_runner are 0): set kubernetes.gpus = 0, or give the job GPUs")
    name, most = max(asked.items(), key=lambda item: item[1], default=("", 0.0))
    if most > k.gpus:
        raise KubernetesError(
            f"{source}: kubernetes.gpus = {k.gpus} but the job's {name} asks {most:g} GPU"
            f"{'' if most == 1 else 's'} on one pod: set kubernetes.gpus = {math.ceil(most)}")
    pods = [Node(names.hostname(i) if names else f"pod-{i}", k.pod_resources())
            for i in range(k.nodes)]
    try:
        place(groups, pods)
    except PlacementError as e:
        raise KubernetesError(f"{source}: the job does not fit kubernetes.nodes = {k.nodes} "
                              f"pod{'' if k.nodes == 1 else 's'} of cpu {k.cpu}, memory "
                              f"{k.memory}, gpus {k.gpus}: "
                              f"{' '.join(str(e).split())}") from None


# --- writing them -----------------------------------------------------------------------------

def placeholder_keys(manifests: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """A copy of ``manifests`` whose Secret holds KEY_PLACEHOLDER instead of the key files: for
    an example kept in a repository (a real secret key must never be committed)."""
    out = copy.deepcopy(list(manifests))
    for doc in out:
        if doc.get("kind") == "Secret":
            doc["stringData"] = {name: KEY_PLACEHOLDER for name in doc.pop("data", {})}
    return out


def dump_manifests(manifests: Sequence[dict[str, Any]], header: str = "") -> str:
    """One multi-document YAML stream (``header``'s lines first, as comments), in the order
    ``kubectl apply -f`` creates them; the cluster file stays readable as a block."""
    import yaml

    class _Dumper(yaml.SafeDumper):
        pass

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    _Dumper.add_representer(str, text)
    comment = "".join(f"# {line}".rstrip() + "\n" for line in header.splitlines())
    body = yaml.dump_all(manifests, Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                         explicit_start=True, width=100)
    return comment + body


def write_manifests(manifests: Sequence[dict[str, Any]], path: str | os.PathLike[str],
                    header: str = "") -> Path:
    """Write ``manifests`` to ``path`` as one YAML stream (mode 0600: the Secret holds the
    cluster's secret key)."""
    out = Path(path)
    data = dump_manifests(manifests, header)
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(data)
    return out


def render_file(cluster: Any, path: str | os.PathLike[str],
                keys_dir: str | os.PathLike[str] | None = None) -> str:
    """``rlmesh launch --render k8s``: the YAML of the manifests of ``cluster`` (a loaded
    ClusterConfig of provider kubernetes) read from ``path``, whose text the ConfigMap holds.
    Without ``keys_dir``, a new key pair: the Secret is its only copy."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise KubernetesError(f"{source}: cannot read it: {e}") from None
    if getattr(cluster, "kubernetes", None) is None:
        raise KubernetesError(f"{source}: no [kubernetes] table (provider = \"kubernetes\")")
    manifests = render(text, cluster.cluster_name, cluster.kubernetes, keys_dir,
                       job=cluster.job, source=source)
    return dump_manifests(manifests, RENDERED_HEADER.format(source=source))


def render_path(path: str | os.PathLike[str],
                keys_dir: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """The manifests of the cluster file at ``path``, read for what they need alone:
    ``cluster_name``, ``[kubernetes]`` and ``[job]`` (checked as ``rlmesh launch`` checks
    them), the file's text going into the ConfigMap as it is."""
    import sys

    from rlmesh.launcher.cluster_job import _parse_job

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pyproject installs tomli there
        import tomli as tomllib
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
        data = tomllib.loads(text)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise KubernetesError(f"{source}: cannot read it: {e}") from None
    try:
        for name in ("cluster_name", "kubernetes", "job"):
            if name not in data:
                raise _Invalid(name, "missing, and required")
        name = _string(data["cluster_name"], "cluster_name")
        k = parse_kubernetes(data["kubernetes"])
        job = _parse_job(data["job"], Path(source).expanduser().parent.absolute())
    except _Invalid as e:
        raise KubernetesError(f"{source}: {e.key}: {e.reason}") from None
    return render(text, name, k, keys_dir, job=job, source=source)
