"""The Kubernetes manifests `rlmesh launch --render k8s` writes, checked against Kubernetes'
published schemas (kubernetes-validate: each release's OpenAPI as JSON Schema, in strict mode,
where a field the API does not know is refused), and the ``[kubernetes]`` table's bad input.

No Kubernetes runs here: what is checked is that the API server's schema accepts every
document, that our own rules the schema does not carry hold (DNS names of pods and the
Service), and that the Secret holds a key pair rlmesh can load.

Run as a script, it writes launcher/kubernetes/rendered.yaml again from
launcher/kubernetes/cluster.toml (test_committed_example_is_current fails until it is).
"""

from __future__ import annotations

import base64
import os
import re
import stat
import sys
from pathlib import Path

import pytest
import yaml

from rlmesh.launcher.cluster_job import _parse_job
from rlmesh.launcher.cluster_values import _Invalid
from rlmesh.launcher.providers import kubernetes as k8s
from rlmesh.wire.security import PUBLIC, SECRET, ClusterKeys

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "launcher" / "kubernetes" / "cluster.toml"
RENDERED = ROOT / "launcher" / "kubernetes" / "rendered.yaml"
# The release the manifests are written for: successPolicy and backoffLimitPerIndex are GA
# from 1.33 (rlmesh/launcher/providers/kubernetes.py). The package's newest is checked too.
K8S_VERSION = "1.33"
EXAMPLE_HEADER = """\
Made by the renderer (rlmesh/launcher/providers/kubernetes.py) from cluster.toml beside it;
tests/unit/test_k8s_manifests.py fails when it is not what the renderer makes now, and
`python tests/unit/test_k8s_manifests.py` writes it again.
The Secret holds placeholders, not keys: `rlmesh launch --render k8s` puts a new CURVE key
pair there (never commit a rendered file with real keys). defaultMode 256 is 0400."""

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
_DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?\Z")


def _validator():
    """kubernetes_validate, which the k8s extra (and the test extra, so CI) installs."""
    try:
        import kubernetes_validate
    except ImportError:
        if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
            pytest.fail("kubernetes-validate is missing (pip install 'rlmesh[k8s]'); CI=true: "
                        "the manifest checks must run on CI, not be skipped")
        pytest.skip("kubernetes-validate (rlmesh[k8s]) is not installed")
    return kubernetes_validate


def _versions(kv) -> list[str]:
    return sorted({K8S_VERSION, kv.utils.major_minor(kv.utils.latest_version())})


def _validate_all(manifests, version: str | None = None) -> None:
    kv = _validator()
    for doc in manifests:
        for v in [version] if version else _versions(kv):
            try:
                kv.validate(doc, v, strict=True)
            except kv.ValidationError as e:
                path = ".".join(str(p) for p in e.path)
                raise AssertionError(f"{doc['kind']} refused by Kubernetes {v}'s schema at "
                                     f"{path}: {e.message}") from None


def _cluster(tmp_path: Path, name: str, kubernetes: str, config: str = "") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(f'cluster_name = "{name}"\nprovider = "kubernetes"\n\n[kubernetes]\n'
                    f'{kubernetes}\n\n[job]\nrun = "PPO"\nenv = "CartPole-v1"\n\n'
                    f'[job.config]\nnum_env_runners = 2\n{config}\n', encoding="utf-8")
    return path


def _by_kind(manifests) -> dict:
    return {m["kind"]: m for m in manifests}


def _pod(manifests) -> dict:
    return _by_kind(manifests)["Job"]["spec"]["template"]["spec"]


def _check_names(manifests, nodes: int) -> None:
    """What the schema does not check: names the API server would refuse, and the pods'
    DNS names the agents dial."""
    kinds = _by_kind(manifests)
    assert [m["kind"] for m in manifests] == ["Secret", "ConfigMap", "Service", "Job"]
    assert _DNS_1035.match(kinds["Service"]["metadata"]["name"])
    job = kinds["Job"]["metadata"]["name"]
    for i in range(nodes):
        assert _DNS_LABEL.match(f"{job}-{i}") and len(f"{job}-{i}") <= 63
    for m in manifests:
        assert _DNS_LABEL.match(m["metadata"]["name"]), m["metadata"]["name"]
    pod = _pod(manifests)
    assert pod["subdomain"] == kinds["Service"]["metadata"]["name"]
    selector = kinds["Service"]["spec"]["selector"]
    labels = kinds["Job"]["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= labels.items()  # the Service finds every pod
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    assert env["RLMESH_HEAD_HOST"] == f"{job}-0.{kinds['Service']['metadata']['name']}"


# --- valid manifests -----------------------------------------------------------------------

def test_example_validates_and_round_trips(tmp_path):
    manifests = k8s.render_path(EXAMPLE, keys_dir=tmp_path / "keys")
    _validate_all(manifests)
    _check_names(manifests, 3)
    kinds = _by_kind(manifests)
    assert kinds["ConfigMap"]["data"]["cluster.toml"] == EXAMPLE.read_text(encoding="utf-8")
    spec = kinds["Job"]["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 3, 3)
    assert spec["successPolicy"] == {"rules": [{"succeededIndexes": "0"}]}
    assert (spec["backoffLimitPerIndex"], spec["maxFailedIndexes"]) == (0, 2)
    assert "backoffLimit" not in spec  # it would fail the Job at the first lost pod
    pod = _pod(manifests)
    assert pod["restartPolicy"] == "Never"
    container = pod["containers"][0]
    assert container["command"] == ["python3", "-m", "rlmesh", "node", "--from-env"]
    assert "nvidia.com/gpu" not in container["resources"]["limits"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env == {"RLMESH_CLUSTER_FILE": "/etc/rlmesh/cluster/cluster.toml",
                   "RLMESH_HEAD_HOST": "cartpole-k8s-0.cartpole-k8s",
                   "RLMESH_JOIN_PORT": "29400", "RLMESH_CURVE_DIR": "/etc/rlmesh/curve"}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[mounts["/etc/rlmesh/curve"]]["secret"] == {
        "secretName": kinds["Secret"]["metadata"]["name"], "defaultMode": 0o400}
    assert volumes[mounts["/etc/rlmesh/cluster"]]["configMap"]["name"] == \
        kinds["ConfigMap"]["metadata"]["name"]
    svc = kinds["Service"]["spec"]
    assert (svc["clusterIP"], svc["publishNotReadyAddresses"]) == ("None", True)
    # The YAML stream is these documents, the cluster file kept as a readable block.
    text = k8s.dump_manifests(manifests)
    assert list(yaml.safe_load_all(text)) == manifests
    assert "cluster.toml: |" in text


def test_secret_holds_the_key_pair(tmp_path):
    keys = tmp_path / "keys"
    first = _by_kind(k8s.render_path(EXAMPLE, keys_dir=keys))["Secret"]
    again = _by_kind(k8s.render_path(EXAMPLE, keys_dir=keys))["Secret"]
    fresh = _by_kind(k8s.render_path(EXAMPLE))["Secret"]
    assert first["type"] == "Opaque" and set(first["data"]) == {PUBLIC, SECRET}
    assert again["data"] == first["data"]  # keys_dir's pair, kept
    assert fresh["data"][SECRET] != first["data"][SECRET]  # no keys_dir: a new pair
    # What a pod's mount holds loads as the cluster's keys.
    mounted = tmp_path / "mounted"
    mounted.mkdir()
    for name, data in fresh["data"].items():
        (mounted / name).write_bytes(base64.b64decode(data))
    loaded = ClusterKeys.load(mounted)
    assert len(loaded.public) == len(loaded.secret) == 40 and loaded.public != loaded.secret


def test_gpu_pods(tmp_path):
    path = _cluster(tmp_path, "gpu-cluster", 'image = "reg.example/rl:1"\nnodes = 2\ngpus = 1\n'
                    'cpu = "8"\nmemory = "32Gi"\nnode_selector = { "nvidia.com/gpu.present" = '
                    '"true" }\n[[kubernetes.tolerations]]\nkey = "nvidia.com/gpu"\n'
                    'operator = "Exists"\neffect = "NoSchedule"\n',
                    "num_learners = 2\nnum_gpus_per_learner = 1")
    manifests = k8s.render_path(path)
    _validate_all(manifests)
    _check_names(manifests, 2)
    pod = _pod(manifests)
    resources = pod["containers"][0]["resources"]
    assert resources["limits"] == {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": 1}
    assert resources["requests"] == {"cpu": "8", "memory": "32Gi"}
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["tolerations"] == [{"operator": "Exists", "key": "nvidia.com/gpu",
                                   "effect": "NoSchedule"}]


@pytest.mark.parametrize("name,expected", [("My_Cluster", "my-cluster"),
                                           ("9lives", "rlmesh-9lives"),
                                           ("a" * 58, "a" * 58)])
def test_odd_names_become_dns_labels(tmp_path, name, expected):
    extra = 'service_account = "trainer.sa"\nttl_seconds_after_finished = 0\n' \
            'namespace = "rl-team"\nlabels = { "example.com/owner" = "me", tier = "" }\n' \
            'image_pull_policy = "Always"\npython = "/opt/venv/bin/python"\nnodes = 10\n' \
            'join_port = 4000\n'
    manifests = k8s.render_path(_cluster(tmp_path, name, f'image = "x/y:z"\n{extra}'))
    _validate_all(manifests)
    _check_names(manifests, 10)
    assert _by_kind(manifests)["Job"]["metadata"]["name"] == expected
    assert {m["metadata"]["namespace"] for m in manifests} == {"rl-team"}
    pod = _pod(manifests)
    assert pod["serviceAccountName"] == "trainer.sa" and "automountServiceAccountToken" not in pod
    assert pod["containers"][0]["command"][0] == "/opt/venv/bin/python"


def test_name_too_long_for_a_host_name(tmp_path):
    # 58 characters and pod 9 make a 60-character host name; pod 99999 would not fit.
    path = _cluster(tmp_path, "a" * 58, 'image = "x"\nnodes = 100000\ncpu = "1"')
    with pytest.raises(k8s.KubernetesError) as e:
        k8s.render_path(path)
    message = str(e.value)
    assert "\n" not in message and f"cluster_name: {'a' * 58!r}" in message
    assert "at most 57" in message


# --- the schema refuses broken manifests (so the checks above can fail) --------------------

def _broken(change) -> list[dict]:
    manifests = k8s.render_path(EXAMPLE)
    change(_by_kind(manifests))
    return manifests


@pytest.mark.parametrize("what,change", [
    ("an unknown field (strict)",
     lambda m: m["Job"]["spec"]["template"]["spec"]["containers"][0].update(gpus=1)),
    ("a typo in a field's name",
     lambda m: m["Service"]["spec"].update(publishNotReadyAddress=True)),
    ("a wrong type", lambda m: m["Job"]["spec"].update(completions="3")),
    ("a missing required field",
     lambda m: m["Job"]["spec"]["template"]["spec"].pop("containers")),
    ("a port as a string", lambda m: m["Service"]["spec"]["ports"][0].update(port="29400")),
])
def test_schema_refuses_broken_manifests(what, change):
    manifests = _broken(change)
    with pytest.raises(AssertionError, match="refused by Kubernetes"):
        _validate_all(manifests, K8S_VERSION)


def test_older_release_refuses_success_policy():
    # 1.29's Job has no successPolicy: the version asked for is the one checked against.
    with pytest.raises(AssertionError, match="successPolicy"):
        _validate_all([_by_kind(k8s.render_path(EXAMPLE))["Job"]], "1.29")


# --- the committed example -----------------------------------------------------------------

def example_text() -> str:
    return k8s.dump_manifests(k8s.placeholder_keys(k8s.render_path(EXAMPLE)), EXAMPLE_HEADER)


def test_committed_example_is_current():
    assert RENDERED.read_text(encoding="utf-8") == example_text(), (
        f"{RENDERED} is stale: run `python tests/unit/test_k8s_manifests.py`")
    docs = list(yaml.safe_load_all(RENDERED.read_text(encoding="utf-8")))
    assert set(_by_kind(docs)["Secret"]["stringData"].values()) == {k8s.KEY_PLACEHOLDER}
    assert "data" not in _by_kind(docs)["Secret"]  # no key in the repository
    _validate_all(docs)


def test_render_file_of_a_loaded_cluster():
    # What `rlmesh launch --render k8s` writes: the file loaded as ClusterConfig, then the YAML.
    from rlmesh.launcher.cluster_config import load_cluster

    text = k8s.render_file(load_cluster(EXAMPLE), EXAMPLE)
    assert text.startswith("# Rendered by `rlmesh launch --render k8s ")
    docs = list(yaml.safe_load_all(text))
    assert k8s.placeholder_keys(docs) == k8s.placeholder_keys(k8s.render_path(EXAMPLE))
    _validate_all(docs)


def test_write_manifests_keeps_the_secret_private(tmp_path):
    manifests = k8s.render_path(EXAMPLE)
    out = k8s.write_manifests(manifests, tmp_path / "rlmesh.yaml", header="made by a test")
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    text = out.read_text(encoding="utf-8")
    assert text.startswith("# made by a test\n---\n")
    assert list(yaml.safe_load_all(text)) == manifests


# --- bad input: one line each --------------------------------------------------------------

BASE = {"image": "x/y:1", "nodes": 2}


@pytest.mark.parametrize("change,key,words", [
    ({"image": None}, "kubernetes.image", "missing, and required"),
    ({"nodes": None}, "kubernetes.nodes", "missing, and required"),
    ({"nodes": 0}, "kubernetes.nodes", "expected an integer >= 1"),
    ({"nodes": True}, "kubernetes.nodes", "expected an integer >= 1"),
    ({"image": "has space"}, "kubernetes.image", "expected an image reference"),
    ({"gpus": -1}, "kubernetes.gpus", "expected an integer >= 0"),
    ({"gpus": 1.5}, "kubernetes.gpus", "expected an integer >= 0"),
    ({"memory": "4m"}, "kubernetes.memory", "did you mean '4Mi'?"),
    ({"memory": "4GB"}, "kubernetes.memory", "expected a Kubernetes quantity > 0"),
    ({"cpu": "two"}, "kubernetes.cpu", "expected a Kubernetes quantity > 0"),
    ({"cpu": "0"}, "kubernetes.cpu", "expected a Kubernetes quantity > 0"),
    ({"cpu": "2Gi"}, "kubernetes.cpu", "millicores"),
    ({"namespace": "Team_A"}, "kubernetes.namespace", "expected a namespace name"),
    ({"join_port": 70000}, "kubernetes.join_port", "port number"),
    ({"image_pull_policy": "always"}, "kubernetes.image_pull_policy", "expected one of"),
    ({"service_account": "Bad Name"}, "kubernetes.service_account", "service account"),
    ({"labels": {"team": 3}}, "kubernetes.labels.team", "quote it"),
    ({"labels": {"-bad": "x"}}, "kubernetes.labels.-bad", "not a Kubernetes label key"),
    ({"labels": {"app.kubernetes.io/instance": "x"}},
     'kubernetes.labels."app.kubernetes.io/instance"', "rlmesh sets this label itself"),
    ({"node_selector": {"pool": "a b"}}, "kubernetes.node_selector.pool", "label value"),
    ({"tolerations": [{"operator": "Equal"}]}, "kubernetes.tolerations[0].key", "missing"),
    ({"tolerations": [{"key": "k", "effect": "NoSchedul"}]},
     "kubernetes.tolerations[0].effect", "expected one of"),
    ({"tolerations": [{"key": "k", "toleration_seconds": 5}]},
     "kubernetes.tolerations[0].toleration_seconds", "only a NoExecute"),
    ({"ttl_seconds_after_finished": -1}, "kubernetes.ttl_seconds_after_finished", ">= 0"),
    ({"gpu": 1}, "kubernetes.gpu", "did you mean 'gpus'?"),
])
def test_bad_table(change, key, words):
    data = {k: v for k, v in {**BASE, **change}.items() if v is not None}
    with pytest.raises(_Invalid) as e:
        k8s.parse_kubernetes(data)
    assert e.value.key == key and words in e.value.reason and "\n" not in e.value.reason


def test_defaults_and_pod_resources():
    k = k8s.parse_kubernetes({"image": "x", "nodes": 3, "cpu": 1.5, "memory": "512Mi"})
    assert (k.namespace, k.gpus, k.join_port, k.python) == ("default", 0, 29400, "python3")
    assert k.pod_resources() == {"CPU": 1.5, "GPU": 0.0, "memory": 512 * 2.0**20}
    assert k8s.quantity("250m") == 0.25 and k8s.quantity("1e3") == 1000.0


def _job(config: dict):
    return _parse_job({"run": "PPO", "env": "CartPole-v1", "config": config}, Path("."))


@pytest.mark.parametrize("table,config,message", [
    ({"gpus": 2}, {},
     ("c.toml: kubernetes.gpus = 2 but the job uses no GPU (num_gpus_per_learner and "
     "num_gpus_per_env_runner are 0): set kubernetes.gpus = 0, or give the job GPUs")),
    ({"gpus": 1}, {"num_gpus_per_env_runner": 2},
     ("c.toml: kubernetes.gpus = 1 but the job's env_runner-1 asks 2 GPUs on one pod: set "
     "kubernetes.gpus = 2")),
    ({"gpus": 0}, {"num_gpus_per_learner": 1},
     ("c.toml: kubernetes.gpus = 0 but the job's driver asks 1 GPU on one pod: set "
     "kubernetes.gpus = 1")),
    ({"nodes": 1, "gpus": 1}, {"num_learners": 2, "num_gpus_per_learner": 1},
     ("c.toml: the job does not fit kubernetes.nodes = 1 pod of cpu 2, memory 4Gi, gpus 1: "
     "group 'learners'")),
    ({"cpu": "1"}, {"num_env_runners": 4},
     ("c.toml: the job does not fit kubernetes.nodes = 2 pods of cpu 1, memory 4Gi, gpus 0: "
     "group 'env_runners'")),
])
def test_pods_the_job_cannot_use(table, config, message):
    k = k8s.parse_kubernetes({**BASE, **table})
    with pytest.raises(k8s.KubernetesError) as e:
        k8s.render("", "c", k, job=_job(config), source="c.toml")
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_script_job_is_not_checked(tmp_path):
    script = tmp_path / "job.py"
    script.write_text("print('hi')\n")
    job = _parse_job({"script": str(script)}, tmp_path)
    k = k8s.parse_kubernetes({**BASE, "gpus": 4})
    assert len(k8s.render("", "c", k, job=job)) == 4  # nothing in the file says its GPUs


if __name__ == "__main__":
    RENDERED.write_text(example_text(), encoding="utf-8")
    print(f"wrote {RENDERED}", file=sys.stderr)
