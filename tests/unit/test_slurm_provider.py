"""The slurm provider's reading of what Slurm gives (host lists, CPU counts, GPUs), its
[slurm] table, the sbatch script it writes, and its one-line refusals. The provider against
a real slurmctld/slurmd is in tests/cluster/test_slurm_launch.py."""

from __future__ import annotations

import shutil

import pytest

from rlmesh.launcher.cluster_config import ClusterConfigError, parse_cluster
from rlmesh.launcher.providers import ProviderError
from rlmesh.launcher.providers.slurm import (Allocation, cpus_per_node, expand_hostlist,
                                             gpus_from_env)
from rlmesh.launcher.providers.slurm_submit import render_sbatch

JOB = {"run": "PPO", "env": "CartPole-v1", "stop": {"training_iteration": 1}}


def cluster(**slurm: object) -> object:
    return parse_cluster({"cluster_name": "s", "provider": "slurm", "slurm": slurm, "job": JOB},
                         "/tmp/c.toml")


@pytest.mark.parametrize("text, names", [
    ("node1", ["node1"]),
    ("node[1-3]", ["node1", "node2", "node3"]),
    ("node[1-2,7],gpu[08-10]", ["node1", "node2", "node7", "gpu08", "gpu09", "gpu10"]),
    ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
    ("a,b[001-002],c", ["a", "b001", "b002", "c"]),
    ("n[9-11]", ["n9", "n10", "n11"]),
])
def test_expand_hostlist_as_scontrol_show_hostnames(text: str, names: list[str]) -> None:
    assert expand_hostlist(text) == names


@pytest.mark.skipif(shutil.which("scontrol") is None, reason="needs Slurm's scontrol")
@pytest.mark.parametrize("text", ["node[1-3]", "node[1-2,7],gpu[08-10]", "rack[1-2]-n[1-2]",
                                  "a,b[001-002],c", "n[9-11],x[098-101]"])
def test_expand_hostlist_agrees_with_scontrol(text: str, tmp_path: object) -> None:
    import os
    import subprocess
    from pathlib import Path

    # scontrol reads a configuration before anything, even to expand a list: a minimal one.
    conf = Path(str(tmp_path)) / "slurm.conf"
    conf.write_text("ClusterName=hostlist\nSlurmctldHost=localhost\n"
                    "NodeName=n1 CPUs=1 State=UNKNOWN\nPartitionName=p Nodes=n1\n")
    done = subprocess.run(["scontrol", "show", "hostnames", text], capture_output=True,
                          text=True, timeout=30, env={**os.environ, "SLURM_CONF": str(conf)})
    assert done.returncode == 0, done.stderr
    assert expand_hostlist(text) == done.stdout.split()


@pytest.mark.parametrize("text", ["node[1-", "node]1[", "node[3-1]", "node[a-b]"])
def test_bad_hostlist_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        expand_hostlist(text)


def test_cpus_per_node() -> None:
    assert cpus_per_node("4(x2),2", 3) == [4, 4, 2]
    assert cpus_per_node("8", 1) == [8]
    with pytest.raises(ValueError, match="gives 2 counts for 3 nodes"):
        cpus_per_node("4(x2)", 3)


def test_gpus_from_env() -> None:
    assert gpus_from_env({"SLURM_GPUS_ON_NODE": "2"}) == 2
    assert gpus_from_env({"SLURM_GPUS_PER_NODE": "a100:4"}) == 4
    assert gpus_from_env({"SLURM_JOB_GRES": "gpu:a100:3"}) == 3
    assert gpus_from_env({}) is None


def test_allocation_from_env() -> None:
    a = Allocation.from_env({"SLURM_JOB_ID": "17", "SLURM_JOB_NODELIST": "n[1-3]",
                             "SLURM_JOB_CPUS_PER_NODE": "2(x3)", "SLURMD_NODENAME": "n1"})
    assert a.nodes == ("n1", "n2", "n3") and a.cpus == (2, 2, 2) and a.batch_host == "n1"
    assert a.gpus_per_node is None
    # salloc's shell runs outside the allocation (a login node): no node of it is this one.
    assert Allocation.from_env({"SLURM_JOB_ID": "18", "SLURM_JOB_NODELIST": "n1"}).batch_host is None


def test_outside_an_allocation_is_one_line() -> None:
    with pytest.raises(ProviderError) as err:
        Allocation.from_env({})
    assert "SLURM_JOB_ID is not set" in str(err.value) and "\n" not in str(err.value)


def test_slurm_table_is_checked_key_by_key() -> None:
    c = cluster(nodes=3, partition="debug", time="00:10:00", gres="gpu:1")
    assert c.provider == "slurm" and c.slurm.nodes == 3 and c.slurm.gres == "gpu:1"
    for bad, key in [({"nodes": 0}, "slurm.nodes"), ({"time": "soon"}, "slurm.time"),
                     ({"gres": "gpu 2"}, "slurm.gres"), ({"nodez": 2}, "slurm.nodez"),
                     ({"sbatch_options": ["constraint=a100"]}, "slurm.sbatch_options[0]")]:
        with pytest.raises(ClusterConfigError) as err:
            cluster(**bad)
        assert err.value.key == key


def test_provider_tables_and_nodes_refused_where_they_do_not_belong() -> None:
    base = {"cluster_name": "s", "job": JOB}
    with pytest.raises(ClusterConfigError, match="provider is 'ssh'"):
        parse_cluster({**base, "head": {"host": "10.0.0.1"}, "nodes": [{"name": "a", "host": "10.0.0.2"}],
                       "slurm": {"nodes": 2}}, "c.toml")
    with pytest.raises(ClusterConfigError, match=r"remove the \[\[nodes\]\]"):
        parse_cluster({**base, "provider": "slurm", "nodes": [{"name": "a", "host": "h"}]}, "c.toml")
    with pytest.raises(ClusterConfigError, match="expected one of"):
        parse_cluster({**base, "provider": "pbs"}, "c.toml")


def test_sbatch_script() -> None:
    c = cluster(nodes=3, partition="debug", time="00:10:00", gres="gpu:1", account="rl",
                sbatch_options=["--exclusive"], setup=["module load cuda"])
    script = render_sbatch(c, "/tmp/c.toml", python="/usr/bin/python3")
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash"
    for line in ["#SBATCH --nodes=3", "#SBATCH --ntasks-per-node=1", "#SBATCH --time=00:10:00",
                 "#SBATCH --partition=debug", "#SBATCH --gres=gpu:1", "#SBATCH --account=rl",
                 "#SBATCH --exclusive", "module load cuda"]:
        assert line in lines
    assert lines[-1] == "/usr/bin/python3 -m rlmesh launch /tmp/c.toml"
    # Every #SBATCH line comes before the first command, as sbatch requires.
    first_command = next(i for i, l in enumerate(lines) if l and not l.startswith("#"))
    assert all(not l.startswith("#SBATCH") for l in lines[first_command:])


def test_submit_needs_a_node_count() -> None:
    with pytest.raises(ProviderError, match="slurm.nodes"):
        render_sbatch(cluster(), "/tmp/c.toml")


def test_the_launcher_example_loads_and_documents_every_key() -> None:
    import re
    from pathlib import Path

    from rlmesh.launcher.cluster_config import load_cluster
    from rlmesh.launcher.providers.tables import SLURM_KEYS

    path = Path(__file__).resolve().parents[2] / "launcher" / "slurm" / "cluster.toml"
    config = load_cluster(path)
    assert config.provider == "slurm" and config.slurm.nodes == 3
    text = path.read_text()
    assert not [k for k in SLURM_KEYS if not re.search(rf"(^|[\s#]){k}\b", text, re.M)]
    script = render_sbatch(config, str(path))
    assert "#SBATCH --cpus-per-task=2" in script


def test_a_missing_slurm_command_is_one_line(tmp_path) -> None:
    """`--submit` where sbatch is not on PATH, and a launch inside an allocation where srun
    is not: each one line naming the command."""
    import os
    import subprocess
    import sys

    path = tmp_path / "c.toml"
    path.write_text('cluster_name = "s"\nprovider = "slurm"\n[slurm]\nnodes = 2\n'
                    '[job]\nrun = "PPO"\nenv = "CartPole-v1"\nstop = { training_iteration = 1 }\n')
    env = {**os.environ, "PATH": str(tmp_path), "RLMESH_CLUSTERS_DIR": str(tmp_path / "c")}
    done = subprocess.run([sys.executable, "-m", "rlmesh", "launch", str(path), "--submit"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip() == ("rlmesh launch: error: 'sbatch' not found on PATH: the slurm "
                                   "provider runs Slurm's own commands (install Slurm's client "
                                   "tools, or load its module)")
    inside = {**env, "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-2]"}
    done = subprocess.run([sys.executable, "-m", "rlmesh", "launch", str(path)], env=inside,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "rlmesh launch: error: 'scontrol' not found on PATH: the slurm provider runs Slurm's "
        "own commands (install Slurm's client tools, or load its module)")


def test_submit_and_render_are_refused_for_another_provider(tmp_path) -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "launcher" / "ssh" / "cluster-netns.toml"
    env = {**os.environ, "RLMESH_CLUSTERS_DIR": str(tmp_path / "c")}
    for flags, line in ((["--submit"], "--submit is for provider 'slurm'"),
                        (["--render", "k8s"], "--render k8s is for provider 'kubernetes'")):
        done = subprocess.run([sys.executable, "-m", "rlmesh", "launch", str(example), *flags],
                              env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2
        assert done.stderr.startswith(f"rlmesh launch: error: {line}"), done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
