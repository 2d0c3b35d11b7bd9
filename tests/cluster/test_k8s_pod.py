"""The pod side of the Kubernetes provider, without Kubernetes: three "pods" in network
namespaces, each started as the kubelet would start the rendered Job's container.

What a pod of the Indexed Job gets, and what each "pod" here gets:

* its host name ``<job>-<i>`` (a UTS namespace of its own);
* exactly the container's environment: the manifest's ``env`` (read from the rendered Job,
  not written again here), ``JOB_COMPLETION_INDEX``, ``HOSTNAME``, the image's ``PATH`` and
  ``HOME``, and the ``KUBERNETES_SERVICE_*`` variables every pod has; nothing of this
  process's (``env -i``);
* the ConfigMap and the Secret mounted where the manifest mounts them (``/etc/rlmesh/...``,
  the key files 0400), and a file system of its own for ``/home``, ``/tmp`` and ``/dev/shm``
  (a mount namespace of its own, with per-pod folders bound there);
* DNS: the headless Service's names of every pod (``<job>-<i>.<service>``, and the pod's own
  FQDN and host name as the kubelet writes them into /etc/hosts), here in
  ``/etc/netns/<ns>/hosts``, which ``ip netns exec`` binds over /etc/hosts;
* the container's command, as the manifest says (``python -m rlmesh node --from-env``).

Pod 0 becomes the head and runs the job; pods 1 and 2 join it. PPO learns CartPole to a low
threshold with an env runner on every pod; every pod's process ends with exit 0 once the head
is done (what the Job's successPolicy needs), and nothing is left in any namespace.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import shlex
import subprocess
import sys
import time
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

import psutil
import pytest

from rlmesh.launcher.providers import kubernetes as k8s

# The standard PATH of a container image (what `docker run` / containerd set without one).
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# What every pod has, enableServiceLinks or not: the API server's Service (unused by rlmesh).
KUBERNETES_ENV = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443",
                  "KUBERNETES_SERVICE_PORT_HTTPS": "443",
                  "KUBERNETES_PORT": "tcp://10.96.0.1:443",
                  "KUBERNETES_PORT_443_TCP": "tcp://10.96.0.1:443",
                  "KUBERNETES_PORT_443_TCP_PROTO": "tcp", "KUBERNETES_PORT_443_TCP_PORT": "443",
                  "KUBERNETES_PORT_443_TCP_ADDR": "10.96.0.1"}
THRESHOLD = 100.0
HOME = "/home/rlmesh"  # the image user's home (the Python with rlmesh is elsewhere, as in an image)
# Inside the "pod": bind its folders where the container has them, take its host name, and
# start the container's command with exactly the given environment.
POD_SHELL = ('echo "$1" >/proc/sys/kernel/hostname && mount --bind "$2" /etc/rlmesh && '
             'mount --bind "$3" /home && mount --bind "$4" /dev/shm && {keep}mount --rbind "$5" /tmp '
             '&& cd /home/rlmesh && shift 5 && exec env -i "$@"')
# This checkout and its venv stand for the image's Python: where they lie under /tmp (a clone
# there, as CI may make), the pod's own /tmp must not hide them.
KEEP = sorted({Path(p).resolve() for p in (sys.prefix, Path(__file__).resolve().parents[2])
               if Path(p).resolve().is_relative_to("/tmp")})


def pod_shell(pod_tmp: Path) -> str:
    """POD_SHELL, with each of KEEP bound into the pod's /tmp at its own path first."""
    keep = ""
    for path in KEEP:
        inside = pod_tmp / path.relative_to("/tmp")
        inside.mkdir(parents=True, exist_ok=True)
        keep += f"mount --bind {shlex.quote(str(path))} {shlex.quote(str(inside))} && "
    return POD_SHELL.format(keep=keep)


def cluster_text(name: str, python: str, stop: str) -> str:
    return f'''cluster_name = "{name}"
provider = "kubernetes"

[kubernetes]
image = "rlmesh-test:local"
nodes = 3
cpu = "2"
memory = "2Gi"
python = "{python}"

[job]
run = "PPO"
env = "CartPole-v1"
local_dir = "/home/rlmesh/results"
experiment_name = "{name}"

[job.config]
num_env_runners = 3
num_envs_per_env_runner = 4
train_batch_size = 1200
minibatch_size = 200
num_epochs = 6
lr = 0.001
model = {{ fcnet_hiddens = [64, 64] }}

[job.stop]
{stop}
'''


@pytest.fixture
def etc_paths():
    """/etc/rlmesh (an empty mount point: each pod binds its own folder there) and
    /etc/netns, made for the test and removed after, with whatever it put in /etc/netns."""
    made = [p for p in (Path("/etc/rlmesh"), Path("/etc/netns")) if not p.exists()]
    for path in made:
        path.mkdir()
    written: list[Path] = []
    try:
        yield written
    finally:
        for folder in written:
            shutil.rmtree(folder, ignore_errors=True)
        for path in reversed(made):
            try:
                path.rmdir()
            except OSError:
                pass


def _netns_pids(ns: str) -> set[int]:
    out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True,
                         check=False).stdout
    return {int(p) for p in out.split()}


class PodJob:
    """The rendered Job's pods, each started in a node's namespace as the kubelet would start
    its container; ``close`` kills what is left and says what that was."""

    def __init__(self, tmp: Path, cluster, etc_paths: list[Path], stop: str) -> None:
        self.tmp = tmp
        self.name = f"t{secrets.token_hex(3)}"
        path = tmp / "cluster.toml"
        path.write_text(cluster_text(self.name, sys.executable, stop))
        self.manifests = {m["kind"]: m for m in k8s.render_path(path)}
        self.k = k8s.parse_kubernetes(tomllib.loads(path.read_text())["kubernetes"])
        self.names = k8s.names_for(self.name, self.k.nodes)
        self.nodes = [cluster.nodes[n] for n in cluster.names]
        self.hosts = [self.names.hostname(i) for i in range(len(self.nodes))]
        self.etc_paths = etc_paths
        self.pods: list[subprocess.Popen] = []
        self.logs: list[Path] = []
        self.baseline = {node.netns: _netns_pids(node.netns) for node in self.nodes}  # sshd
        self.home = tmp / "pod-0" / "home" / "rlmesh"  # pod 0's home, seen from here
        self.state_file = self.home / ".rlmesh" / "clusters" / self.name / "head.json"

    def start(self) -> None:
        service = self.manifests["Service"]["metadata"]["name"]
        namespace = self.manifests["Job"]["metadata"]["namespace"]
        dns = "".join(f"{node.address}\t{self.hosts[i]}.{service}.{namespace}.svc.cluster.local "
                      f"{self.hosts[i]}.{service}\n" for i, node in enumerate(self.nodes))
        for i, node in enumerate(self.nodes):
            host = self.hosts[i]
            # /etc/hosts as the kubelet writes it for a pod with a hostname and subdomain,
            # and the cluster DNS's records of the headless Service.
            folder = Path("/etc/netns") / node.netns
            folder.mkdir()
            self.etc_paths.append(folder)
            (folder / "hosts").write_text(
                f"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
                f"{node.address}\t{host}.{service}.{namespace}.svc.cluster.local {host}\n{dns}")
            self._start_pod(i, node)

    def _start_pod(self, i: int, node) -> None:
        pod_spec = self.manifests["Job"]["spec"]["template"]["spec"]
        container = pod_spec["containers"][0]
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in pod_spec["volumes"]}
        pod = self.tmp / f"pod-{i}"
        etc = pod / "etc-rlmesh"
        for sub in ("home/rlmesh", "shm", "tmp"):
            (pod / sub).mkdir(parents=True)
        os.chmod(pod / "tmp", 0o1777)
        os.chmod(pod / "shm", 0o1777)
        # The ConfigMap's file and the Secret's keys, where the manifest mounts them.
        config_dir = etc / Path(mounts["cluster-file"]).relative_to("/etc/rlmesh")
        config_dir.mkdir(parents=True)
        for file, text in self.manifests["ConfigMap"]["data"].items():
            (config_dir / file).write_text(text)
        keys_dir = etc / Path(mounts["curve-keys"]).relative_to("/etc/rlmesh")
        keys_dir.mkdir(parents=True)
        for file, data in self.manifests["Secret"]["data"].items():
            (keys_dir / file).write_bytes(base64.b64decode(data))
            os.chmod(keys_dir / file, volumes["curve-keys"]["secret"]["defaultMode"])
        env = {e["name"]: e["value"] for e in container["env"]}
        env.update(KUBERNETES_ENV, JOB_COMPLETION_INDEX=str(i), HOSTNAME=self.hosts[i],
                   PATH=IMAGE_PATH, HOME=HOME)
        assert env == {**k8s.pod_env(self.names, self.k, i), **KUBERNETES_ENV,
                       "PATH": IMAGE_PATH, "HOME": HOME}
        argv = ["ip", "netns", "exec", node.netns, "unshare", "--uts", "--mount",
                "--propagation", "private", "sh", "-c", pod_shell(pod / "tmp"), "pod", self.hosts[i],
                str(etc), str(pod / "home"), str(pod / "shm"), str(pod / "tmp"),
                *(f"{key}={value}" for key, value in env.items()), *container["command"]]
        self.logs.append(pod / "log.txt")
        with open(self.logs[-1], "wb") as out:
            self.pods.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL, start_new_session=True))

    def state(self, key: str, timeout: float = 240) -> dict:
        """The head's state file once it has ``key``, while every pod still runs."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and all(p.poll() is None for p in self.pods):
            try:
                state = json.loads(self.state_file.read_text())
                if state.get(key):
                    return state
            except (OSError, ValueError):
                pass
            time.sleep(0.5)
        raise AssertionError(f"no {key} in {self.state_file}:\n{self.tails()}")

    def results(self) -> list[dict]:
        found = list((self.home / "results").glob("*/*/result.json"))
        if not found:
            return []
        return [json.loads(line) for line in found[0].read_text().splitlines() if line]

    def evict(self, i: int) -> None:
        """Pod ``i`` goes (evicted, its node drained): every process of its container dies."""
        for pid in _netns_pids(self.nodes[i].netns) - self.baseline[self.nodes[i].netns]:
            try:
                psutil.Process(pid).kill()
            except psutil.NoSuchProcess:
                pass

    def wait(self, timeout: float = 420) -> list[int | None]:
        deadline = time.monotonic() + timeout
        while any(p.poll() is None for p in self.pods) and time.monotonic() < deadline:
            time.sleep(0.5)
        return [p.poll() for p in self.pods]

    def tails(self) -> str:
        return "\n".join(f"--- pod {i} (exit {p.poll()}):\n"
                         f"{log.read_text(errors='replace')[-3000:]}"
                         for i, (p, log) in enumerate(zip(self.pods, self.logs)))

    def close(self) -> dict[str, list[str]]:
        """Kill what is left; what was left in each namespace besides its sshd."""
        for p in self.pods:
            if p.poll() is None:
                p.kill()
                p.wait()
        leftovers = {}
        for node in self.nodes:
            extra = _netns_pids(node.netns) - self.baseline[node.netns]
            if extra:
                leftovers[node.netns] = [_cmdline(pid) for pid in extra]
                for pid in extra:
                    try:
                        psutil.Process(pid).kill()
                    except psutil.NoSuchProcess:
                        pass
        return leftovers


def test_pods_train_ppo_with_a_runner_on_every_pod(tmp_path, netns_cluster_factory, etc_paths):
    job = PodJob(tmp_path, netns_cluster_factory(3), etc_paths,
                 f"episode_reward_mean = {THRESHOLD}\ntraining_iteration = 80")
    try:
        job.start()
        placement = job.state("placement")["placement"]
        runners = {placement[f"env_runner-{r}"] for r in (1, 2, 3)}
        assert runners == set(job.hosts), placement  # a runner on every pod
        codes = job.wait()
        # Every pod ends by itself, with success: the head's job done, its agents stopped.
        assert codes == [0, 0, 0], job.tails()
    finally:
        leftovers = job.close()
    assert not leftovers, leftovers  # every pod's processes ended with it
    rows = job.results()
    best = max(r["episode_reward_mean"] for r in rows)
    assert best >= THRESHOLD, best
    assert rows[-1]["num_healthy_env_runners"] == 3


def test_an_evicted_pod_is_a_lost_node(tmp_path, netns_cluster_factory, etc_paths):
    # The Job's backoffLimitPerIndex = 0 and maxFailedIndexes = nodes - 1 let an agent's pod
    # fail without failing the Job: the head must see a lost node, start its runner again on
    # the pods left, and finish; pods 0 and 1 then succeed (the successPolicy's index 0).
    job = PodJob(tmp_path, netns_cluster_factory(3), etc_paths,
                 "training_iteration = 40\ntimesteps_total = 10000000")
    try:
        job.start()
        job.state("placement")
        victim = job.hosts[2]
        deadline = time.monotonic() + 120
        while len(job.results()) < 3:  # a few iterations first
            assert time.monotonic() < deadline and job.pods[0].poll() is None, job.tails()
            time.sleep(0.2)
        job.evict(2)
        codes = job.wait()
        assert codes[:2] == [0, 0] and codes[2] != 0, job.tails()
    finally:
        leftovers = job.close()
    assert not leftovers, leftovers
    head_log = job.logs[0].read_text(errors="replace")
    assert f"[{victim}] node lost" in head_log, head_log
    rows = job.results()
    # Room for the loss to be seen (the head's heartbeats: a pod has no other lifeline) and
    # its runner started again before the stop, on a quiet machine too.
    assert rows[-1]["training_iteration"] == 40
    # Its runner started again on a pod left (2 CPUs each: the driver and 3 runners fit on 2).
    assert rows[-1]["num_env_runner_restarts"] >= 1
    assert rows[-1]["num_healthy_env_runners"] == 3, rows[-1]
    assert rows[-1]["timesteps_total"] > rows[-5]["timesteps_total"]  # sampling went on


def _cmdline(pid: int) -> str:
    try:
        return " ".join(psutil.Process(pid).cmdline())
    except psutil.NoSuchProcess:
        return "(gone)"
