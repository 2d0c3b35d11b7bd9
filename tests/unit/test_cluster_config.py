"""The cluster file of `rlmesh launch`: the shipped files load, every mistake is named by its
key with what was expected, node overrides, the setup hash, and resource detection."""

from __future__ import annotations

import copy
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from rlmesh.launcher import cluster_config as cc
from rlmesh.launcher.cluster_config import (ClusterConfig, ClusterConfigError, detect_resources,
                                            load_cluster, parse_cluster)
from rlmesh.placement import node_resources
from rlmesh.placement.scheduler import place
from rlmesh.runtime.resources import Bundle, PlacementGroup

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
LAUNCHER = Path(__file__).resolve().parents[2] / "launcher"
NETNS_SCRIPT = DEPLOY / "netns-cluster.sh"

BASE: dict[str, Any] = {
    "cluster_name": "test",
    "ssh": {"user": "alice", "identity_file": "keys/id", "python": "python3"},
    "head": {"host": "10.1.0.1"},
    "nodes": [{"name": "w1", "host": "10.1.0.2"},
              {"name": "w2", "host": "10.1.0.3", "port": 2222, "user": "bob",
               "identity_file": "/keys/bob", "python": "/venv/bin/python"},
              {"name": "w3", "host": "w3.example.org", "resources": {"CPU": 4, "GPU": 0}}],
    "job": {"run": "PPO", "env": "CartPole-v1", "config": {"num_env_runners": 2},
            "stop": {"training_iteration": 3}},
}


def parse(tmp_path: Path, **changes: Any) -> ClusterConfig:
    """BASE with top-level keys replaced (None: removed), read as if from tmp_path/c.toml."""
    data = copy.deepcopy(BASE)
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return parse_cluster(data, str(tmp_path / "c.toml"))


def error(tmp_path: Path, **changes: Any) -> ClusterConfigError:
    with pytest.raises(ClusterConfigError) as info:
        parse(tmp_path, **changes)
    return info.value


def node(i: int, **changes: Any) -> list[dict[str, Any]]:
    """BASE's nodes with node i changed."""
    nodes = copy.deepcopy(BASE["nodes"])
    nodes[i].update(changes)
    return nodes


# --- the shipped files -------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["ssh/cluster.example.toml", "ssh/cluster-netns.toml",
                                  "gpu/cluster-gpu.toml"])
def test_launcher_ssh_files_load(name: str) -> None:
    config = load_cluster(LAUNCHER / name)
    assert config.nodes and config.job.kind == "train"
    assert config.security.curve
    detected = {n: {"CPU": 2.0, "GPU": 0.0, "memory": 1e9} for n in config.needs_detection()}
    assert [n.name for n in config.scheduler_nodes(detected)] == [n.name for n in config.nodes]


def test_example_file_mentions_every_key() -> None:
    text = (LAUNCHER / "ssh" / "cluster.example.toml").read_text()
    # [slurm] and [kubernetes] are documented by their own examples under launcher/.
    keys = set(cc.TOP_KEYS + cc.SSH_KEYS + cc.NODE_KEYS + cc.TRAIN_KEYS + cc.SCRIPT_KEYS)
    keys |= {"exclude", "src", "dst", "curve", "insecure_trusted_network"}
    missing = [k for k in keys if not re.search(rf"(^|[\s#\[]){k}\b", text, re.M)]
    assert not missing


def test_netns_file_matches_the_script() -> None:
    config = load_cluster(LAUNCHER / "ssh" / "cluster-netns.toml")
    assert config.head.host == "10.213.0.1"
    assert [(n.name, n.host) for n in config.nodes] == [
        ("node1", "10.213.0.2"), ("node2", "10.213.0.3"), ("node3", "10.213.0.4")]
    assert config.ssh.user == "root"
    state = Path("/tmp/rlmesh-netns-rlmesh")
    assert config.ssh.identity_file == state / "id_ed25519"
    assert config.known_hosts == state / "known_hosts"
    if NETNS_SCRIPT.exists():  # the script's own defaults: prefix, state dir, first block
        script = NETNS_SCRIPT.read_text()
        assert "PREFIX=rlmesh" in script and "rlmesh-netns-$PREFIX" in script
        assert "readonly NET=10.213.0" in script and "IdentityFile $STATE/id_ed25519" in script
    # namespaces share the machine's CPUs: each node declares its share, not the whole machine
    nodes = config.scheduler_nodes({n.name: {"CPU": 64.0, "GPU": 0.0} for n in config.nodes})
    assert [n.resources["CPU"] for n in nodes] == [2.0, 2.0, 2.0]


# --- a valid file ------------------------------------------------------------------------------

def test_defaults_and_per_node_overrides(tmp_path: Path) -> None:
    config = parse(tmp_path)
    assert config.ssh.port == 22 and config.ssh.connect_timeout_s == 10.0
    assert config.security.curve and not config.security.insecure_trusted_network
    w1, w2, w3 = (config.ssh_target(n) for n in ("w1", "w2", "w3"))
    assert (w1.host, w1.port, w1.user, w1.python) == ("10.1.0.2", 22, "alice", "python3")
    assert w1.identity_file == tmp_path / "keys/id"  # relative to the file's folder
    assert (w2.port, w2.user, w2.python) == (2222, "bob", "/venv/bin/python")
    assert w2.identity_file == Path("/keys/bob")
    assert w3.host == "w3.example.org" and w3.user == "alice"
    assert w1.known_hosts == Path("~/.rlmesh/clusters/test/known_hosts").expanduser()
    with pytest.raises(KeyError, match="no node 'w9'"):
        config.ssh_target("w9")


def test_ssh_defaults_to_ssh_own_choices(tmp_path: Path) -> None:
    target = parse(tmp_path, ssh=None).ssh_target("w1")
    assert target.user is None and target.identity_file is None and target.python == "python3"
    known = parse(tmp_path, ssh={"known_hosts": "~/kh"}).known_hosts
    assert known == Path("~/kh").expanduser()


def test_job_as_rlmesh_train_reads_it(tmp_path: Path) -> None:
    job = parse(tmp_path, job={"run": "ppo", "config": {"env": "CartPole-v1", "num_workers": 3,
                                                         "lambda": 0.9},
                               "stop": {"info": {"learner": {"kl": 0.5}}},
                               "checkpoint_freq": 5, "experiment_name": "x"}).job
    assert job.run == "PPO" and job.env == "CartPole-v1"
    assert job.config["num_env_runners"] == 3  # RLlib's old name, as `rlmesh train` takes it
    spec = job.train_spec()
    assert spec.stop == {"info/learner/kl": 0.5} and spec.checkpoint_freq == 5
    assert spec.experiment == "x" and spec.config["lambda"] == 0.9
    assert parse(tmp_path, job={"run": "PPO", "env": "CartPole-v1"}).job.train_spec().stop == {
        "training_iteration": 100}  # rlmesh train's default


def test_script_job(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('hi')\n")
    job = parse(tmp_path, job={"script": "train.py", "args": ["--seed", "1"]}).job
    assert job.kind == "script" and job.script == tmp_path / "train.py"
    assert job.args == ("--seed", "1")
    with pytest.raises(ValueError, match="script job"):
        job.train_spec()


def test_env_and_sync(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    config = parse(tmp_path, env={"OMP_NUM_THREADS": "1"},
                   sync=[{"src": "pkg", "dst": "~/pkg"}], setup_commands=["pip install -e ~/pkg"])
    assert dict(config.env) == {"OMP_NUM_THREADS": "1"}
    assert config.sync[0].src == tmp_path / "pkg" and config.sync[0].dst == "~/pkg"
    assert config.sync[0].exclude == cc.DEFAULT_SYNC_EXCLUDE


def test_insecure_opt_out_is_explicit(tmp_path: Path) -> None:
    config = parse(tmp_path, security={"curve": False, "insecure_trusted_network": True})
    assert not config.security.curve


# --- resources and the scheduler's nodes -------------------------------------------------------

def test_declared_resources_win_and_absent_ones_are_detected(tmp_path: Path) -> None:
    config = parse(tmp_path, nodes=node(0, resources={"GPU": 0, "ssd": 2}, labels=["fast"]))
    w1 = config.nodes[0]
    assert dict(w1.resources) == {"GPU": 0.0, "ssd": 2.0}  # GPU = 0 given, CPU not given
    assert w1.undeclared == ("CPU", "memory")
    assert config.needs_detection() == ["w1", "w2", "w3"]  # w3 leaves memory out
    nodes = config.scheduler_nodes({"w1": {"CPU": 8, "GPU": 4, "memory": 1e9},
                                    "w2": {"CPU": 16, "GPU": 1}, "w3": {"CPU": 32, "GPU": 2}})
    assert [n.name for n in nodes] == ["w1", "w2", "w3"]  # the head takes no work
    assert dict(nodes[0].resources) == {"CPU": 8, "GPU": 0, "memory": 1e9, "ssd": 2,
                                        "fast": 1, "node:w1": 1}
    assert dict(nodes[2].resources) == {"CPU": 4, "GPU": 0, "node:w3": 1}


def test_head_takes_work_only_with_resources(tmp_path: Path) -> None:
    config = parse(tmp_path, head={"host": "10.1.0.1", "resources": {"CPU": 2},
                                   "labels": ["driver"]})
    nodes = config.scheduler_nodes({"head": {"CPU": 8, "GPU": 1}, "w1": {"CPU": 1, "GPU": 0},
                                    "w2": {"CPU": 1, "GPU": 0}})
    assert nodes[0].name == "head"
    assert dict(nodes[0].resources) == {"CPU": 2, "GPU": 1, "driver": 1, "node:head": 1}
    # a bundle pinned with node:<name> lands there
    pinned = PlacementGroup((Bundle({"CPU": 1, "node:w2": 0.01}),))
    assert place([pinned], nodes)[(0, 0)] == "w2"
    alone = parse(tmp_path, head={"host": "127.0.0.1", "resources": {}}, nodes=None)
    assert alone.nodes == () and alone.needs_detection() == ["head"]


def test_scheduler_nodes_needs_cpu_and_gpu_from_somewhere(tmp_path: Path) -> None:
    config = parse(tmp_path)
    with pytest.raises(ClusterConfigError) as info:
        config.scheduler_nodes({"w1": {"CPU": 8, "GPU": 0}, "w2": {"CPU": 8}})
    assert info.value.key == "nodes[1].resources.GPU"
    assert "not detected" in str(info.value)
    with pytest.raises(ValueError, match="w9, which is no node"):
        config.scheduler_nodes({"w9": {"CPU": 1, "GPU": 0}})


# --- every mistake, by its key -----------------------------------------------------------------

@pytest.mark.parametrize("changes, key, words", [
    ({"cluster_name": None}, "cluster_name", "missing"),
    ({"cluster_name": "my cluster"}, "cluster_name", "letters, digits"),
    ({"cluster_name": "-x"}, "cluster_name", "no leading"),
    ({"head": None}, "head", "missing"),
    ({"job": None}, "job", "missing"),
    ({"setup_command": []}, "setup_command", "did you mean 'setup_commands'?"),
    ({"ssh": {"identity_fle": "x"}}, "ssh.identity_fle", "did you mean 'identity_file'?"),
    ({"ssh": {"port": 0}}, "ssh.port", "from 1 to 65535, got 0 (an integer)"),
    ({"ssh": {"port": "22"}}, "ssh.port", "got '22' (a string)"),
    ({"ssh": {"connect_timeout_s": 0}}, "ssh.connect_timeout_s", "> 0"),
    ({"ssh": {"user": "-oProxyCommand=x"}}, "ssh.user", "a user name"),
    ({"ssh": {"python": ""}}, "ssh.python", "Python interpreter"),
    ({"head": {"host": "0.0.0.0"}}, "head.host", "wildcard address"),
    ({"head": {"host": "::"}}, "head.host", "wildcard address"),
    ({"head": {"host": "127.0.0.1"}}, "head.host", "loopback"),
    ({"head": {"host": "10.1.0.1", "labels": ["x"]}}, "head.labels", "head.resources"),
    ({"head": {"host": "10.1.0.1", "resouces": {}}}, "head.resouces",
     "did you mean 'resources'?"),
    ({"nodes": node(0, host="-oProxyCommand=evil")}, "nodes[0].host", "host name or an IP"),
    ({"nodes": node(1, name="w1")}, "nodes[1].name", "'w1' is also nodes[0].name"),
    ({"nodes": node(1, name="head")}, "nodes[1].name", "the head's name"),
    ({"nodes": node(1, host="10.1.0.2", port=22)}, "nodes[1].host", "also nodes[0].host"),
    ({"nodes": node(2, identity_fle="k")}, "nodes[2].identity_fle",
     "did you mean 'identity_file'?"),
    ({"nodes": node(2, setup_commands=["x"])}, "nodes[2].setup_commands",
     "top-level key"),
    ({"nodes": node(2, resources={"GPU": "two"})}, "nodes[2].resources.GPU",
     "expected a number >= 0, got 'two' (a string)"),
    ({"nodes": node(2, resources={"GPU": 1.5})}, "nodes[2].resources.GPU", "whole number"),
    ({"nodes": node(2, resources={"CPU": -1})}, "nodes[2].resources.CPU", ">= 0"),
    ({"nodes": node(2, resources={"CPU": True})}, "nodes[2].resources.CPU", "a boolean"),
    ({"nodes": node(2, resources={"gpus": 1})}, "nodes[2].resources.gpus",
     "did you mean 'GPU'?"),
    ({"nodes": node(2, resources={"node:w1": 1})}, 'nodes[2].resources."node:w1"', "taken"),
    ({"nodes": node(2, labels="fast")}, "nodes[2].labels", "array of strings"),
    ({"nodes": node(2, labels=["GPU"])}, "nodes[2].labels[0]", "built-in"),
    ({"nodes": node(2, labels=["ssd"], resources={"ssd": 1})}, "nodes[2].labels[0]",
     "also given under resources"),
    ({"nodes": node(2, labels=["a", "a"])}, "nodes[2].labels[1]", "twice"),
    ({"nodes": node(0, port=70000)}, "nodes[0].port", "65535"),
    ({"nodes": []}, "nodes", "head takes no work"),
    ({"nodes": {"name": "w1"}}, "nodes", "expected an array"),
    ({"env": {"N": 1}}, "env.N", 'quote it: N = "1"'),
    ({"env": {"1X": "a"}}, "env.1X", "environment variable name"),
    ({"env": {"A B": "a"}}, 'env."A B"', "environment variable name"),
    ({"sync": [{"src": "nowhere", "dst": "x"}]}, "sync[0].src", "no such file or folder"),
    ({"sync": [{"src": "."}]}, "sync[0].dst", "missing"),
    ({"setup_commands": ["ok", ""]}, "setup_commands[1]", "non-empty string"),
    ({"security": {"curve": False}}, "security.curve", "security.insecure_trusted_network"),
    ({"security": {"curve": "no"}}, "security.curve", "true or false"),
])
def test_mistakes_name_their_key(tmp_path: Path, changes: dict[str, Any], key: str,
                                 words: str) -> None:
    e = error(tmp_path, **changes)
    assert e.key == key
    assert str(e).startswith(f"{tmp_path / 'c.toml'}: {key}: ")
    assert words in str(e)


def test_job_with_search_spaces_or_samples_is_a_sweep(tmp_path: Path) -> None:
    grid = {"lr": {"grid_search": [0.001, 0.0005]}, "num_env_runners": 2}
    job = parse(tmp_path, job={**BASE["job"], "config": grid}).job
    assert job.is_sweep and job.config["lr"] == {"grid_search": [0.001, 0.0005]}
    assert parse(tmp_path, job={**BASE["job"], "num_samples": 3}).job.is_sweep
    assert not parse(tmp_path).job.is_sweep


JOB = BASE["job"]


@pytest.mark.parametrize("job, key, message", [
    ({**JOB, "config": {"lamda": 0.9}}, "job.config",
     "unknown config key 'lamda'; did you mean 'lambda'?"),
    ({**JOB, "config": {"lr": "fast"}}, "job.config", "lr: expected float, got 'fast'"),
    ({**JOB, "run": "PPP"}, "job.run", "unknown algorithm 'PPP'; did you mean 'PPO'?"),
    ({**JOB, "stop": {"timesteps_total": "1e6"}}, "job.stop", "must be a number"),
    ({**JOB, "checkpoint_freq": -1}, "job.checkpoint_freq", "integer >= 0"),
    ({**JOB, "num_samples": 0}, "job.num_samples", "integer >= 1"),
    ({**JOB, "config": {"lr": {"grid_search": ["fast"]}}}, "job.config",
     "lr: expected float, got 'fast'"),
    ({**JOB, "chekpoint_freq": 1}, "job.chekpoint_freq", "did you mean 'checkpoint_freq'?"),
    ({**JOB, "script": "t.py"}, "job", "not both; found script and run, env, config, stop"),
    ({**JOB, "args": ["x"]}, "job.args", "job.script"),
    ({"env": "CartPole-v1"}, "job.run", "missing: give run"),
    ({}, "job.run", "or script"),
    ({"run": "PPO"}, "job.env", "missing"),
    ({"run": "PPO", "config": {"env": 3}}, "job.config.env", "expected a string"),
    ({"script": "missing.py"}, "job.script", "no such file"),
    ({"script": "t.py", "args": "--x"}, "job.args", "array of strings"),
])
def test_job_mistakes(tmp_path: Path, job: dict[str, Any], key: str, message: str) -> None:
    (tmp_path / "t.py").write_text("")
    e = error(tmp_path, job=job)
    assert e.key == key
    assert f": {key}: " in str(e) and message in str(e)


def test_loopback_head_is_fine_when_every_node_is_local(tmp_path: Path) -> None:
    config = parse(tmp_path, head={"host": "127.0.0.1"},
                   nodes=[{"name": "a", "host": "localhost"}, {"name": "b", "host": "127.0.0.2"}])
    assert config.head.host == "127.0.0.1"


def test_toml_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('cluster_name = "x"\n[head]\nhost = \n')
    with pytest.raises(ClusterConfigError, match=rf"^{re.escape(str(path))}: invalid TOML at "
                                                 r"line 3, column \d+: "):
        load_cluster(path)
    with pytest.raises(ClusterConfigError, match="no such file"):
        load_cluster(tmp_path / "absent.toml")


def test_a_key_after_a_table_header_gets_a_hint(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('cluster_name = "x"\n[job]\nscript = "c.toml"\n[head]\nhost = "10.0.0.1"\n'
                    'resources = {}\nsetup_commands = ["true"]\n')
    with pytest.raises(ClusterConfigError, match=r"head\.setup_commands: unknown key; "
                                                 r"setup_commands is a top-level key"):
        load_cluster(path)
    path.write_text('[head]\nhost = "10.0.0.1"\ncluster_name = "x"\n')
    with pytest.raises(ClusterConfigError, match=r": cluster_name: missing, and required; "
                                                 r"there is one under \[head\]"):
        load_cluster(path)


# --- the setup hash ----------------------------------------------------------------------------

def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _hash(tmp_path: Path, src: str = "src", commands: tuple[str, ...] = ("pip install x",),
          **changes: Any) -> str:
    return parse(tmp_path, setup_commands=list(commands),
                 sync=[{"src": src, "dst": "~/app"}], **changes).setup_hash()


def test_setup_hash_follows_commands_and_synced_contents(tmp_path: Path) -> None:
    _tree(tmp_path / "src", {"a.py": "A", "pkg/b.py": "B"})
    before = _hash(tmp_path)
    assert _hash(tmp_path) == before
    assert _hash(tmp_path, commands=("pip install y",)) != before
    assert _hash(tmp_path, commands=("pip install x", "true")) != before
    (tmp_path / "src/pkg/b.py").write_text("B2")
    assert _hash(tmp_path) != before
    (tmp_path / "src/pkg/b.py").write_text("B")
    assert _hash(tmp_path) == before
    (tmp_path / "src/new.txt").write_text("")
    assert _hash(tmp_path) != before
    (tmp_path / "src/new.txt").unlink()
    os.chmod(tmp_path / "src/a.py", 0o755)
    assert _hash(tmp_path) != before  # an executable bit is part of what is copied
    os.chmod(tmp_path / "src/a.py", 0o644)
    assert _hash(tmp_path) == before


def test_setup_hash_ignores_what_is_not_copied(tmp_path: Path) -> None:
    _tree(tmp_path / "src", {"a.py": "A"})
    before = _hash(tmp_path)
    os.utime(tmp_path / "src/a.py", (1, 1))  # times
    (tmp_path / "src/__pycache__").mkdir()
    (tmp_path / "src/__pycache__/a.pyc").write_text("x")  # excluded by default
    assert _hash(tmp_path) == before
    assert _hash(tmp_path, nodes=node(0, host="10.9.9.9"), env={"X": "1"}) == before
    _tree(tmp_path / "elsewhere", {"a.py": "A"})  # same contents in another folder
    assert _hash(tmp_path, src="elsewhere") == before


def test_setup_hash_counts_a_symlink_by_its_target(tmp_path: Path) -> None:
    _tree(tmp_path / "src", {"a.py": "A", "b.py": "B"})
    (tmp_path / "src/link").symlink_to("a.py")
    before = _hash(tmp_path)
    (tmp_path / "src/link").unlink()
    (tmp_path / "src/link").symlink_to("b.py")
    assert _hash(tmp_path) != before
    assert [rel for rel, _ in parse(tmp_path, sync=[{"src": "src", "dst": "d"}])
            .sync[0].files()] == ["a.py", "b.py", "link"]


def test_setup_hash_of_a_single_file(tmp_path: Path) -> None:
    _tree(tmp_path, {"req.txt": "numpy"})
    before = _hash(tmp_path, src="req.txt")
    (tmp_path / "req.txt").write_text("numpy\ntorch")
    assert _hash(tmp_path, src="req.txt") != before


# --- detection ---------------------------------------------------------------------------------

def test_detect_resources_here() -> None:
    found = detect_resources()
    assert set(found) == {"CPU", "GPU", "memory"}
    assert found["CPU"] >= 1 and found["CPU"] == int(found["CPU"])
    assert found["GPU"] == 0  # this machine has none
    assert found["memory"] > 2**27


def _fake_smi(monkeypatch: pytest.MonkeyPatch, stdout: str, returncode: int = 0) -> None:
    monkeypatch.setattr(node_resources.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(node_resources.subprocess, "run",
                        lambda *a, **k: subprocess.CompletedProcess(a[0], returncode, stdout, ""))


def test_gpus_counted_from_nvidia_smi(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_smi(monkeypatch, "GPU 0: NVIDIA H100 (UUID: GPU-1)\n"
                           "  MIG 1g.10gb Device 0: (UUID: MIG-1)\n"
                           "GPU 1: NVIDIA H100 (UUID: GPU-2)\n")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert detect_resources()["GPU"] == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert detect_resources()["GPU"] == 1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert detect_resources()["GPU"] == 0


def test_a_failing_nvidia_smi_means_no_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_smi(monkeypatch, "NVIDIA-SMI has failed", returncode=9)
    monkeypatch.delitem(node_resources.sys.modules, "torch", raising=False)
    assert detect_resources()["GPU"] == 0
