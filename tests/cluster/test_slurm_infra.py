"""The real Slurm the Slurm provider's tests stand on (deploy/slurm-netns.sh): srun and sbatch
reach every netns node from this machine and from inside a node, a job's tasks see what a real
node's would, scancel leaves nothing, and the srun behaviour a provider relies on for its
agents' step (stdin EOF, srun's death ending the step, one lost task not ending the others)
holds. No rlmesh code runs here."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.cluster.slurm_cluster import (
    SlurmCluster,
    remove_abandoned_slurm,
    start_slurm,
)

pytestmark = pytest.mark.timeout(120)

STEP = ["srun", "--overlap", "--nodes=3", "--ntasks-per-node=1"]


def write_script(path: Path, body: str, *sbatch: str) -> Path:
    lines = ["#!/bin/bash", *(f"#SBATCH {option}" for option in sbatch), body]
    path.write_text("\n".join(lines) + "\n")
    return path


def wait_for(what: str, check: Callable[[], Any], timeout: float = 15.0) -> Any:
    """``check()`` until it returns something true; that value."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not after {timeout} s")
        time.sleep(0.05)
    return value


def tasks_running(slurm: SlurmCluster, job: int, *argv: str) -> dict[str, psutil.Process]:
    """The job's processes whose command line ends with ``argv``, by the Slurm node whose
    namespace holds them."""
    found = {}
    for node in slurm.nodes.nodes:
        pids = slurm.namespace_pids(node)
        for proc in slurm.job_processes(job):
            try:
                if proc.pid in pids and proc.cmdline()[1:] == list(argv):
                    found[slurm.slurm_name(node)] = proc
            except psutil.Error:
                continue
    return found


def three_tasks(slurm: SlurmCluster, job: int, *argv: str) -> dict[str, psutil.Process] | None:
    """``tasks_running`` once there is one on each of the three nodes."""
    tasks = tasks_running(slurm, job, *argv)
    return tasks if len(tasks) == 3 else None


def alive(procs: Iterable[psutil.Process]) -> list[psutil.Process]:
    """Those of ``procs`` still running (a zombie has ended)."""
    found = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.NoSuchProcess:
            continue
    return found


@pytest.fixture
def holding_job(slurm_cluster: SlurmCluster, tmp_path: Path):
    """A running 3-node batch job that only waits: the allocation a provider's step runs in.
    Cancelled after the test."""
    script = write_script(tmp_path / "hold.sh", "exec sleep 300", "--nodes=3",
                          f"--output={tmp_path}/hold-%j.out")  # fmt: skip
    job = slurm_cluster.sbatch(script)
    try:
        wait_for(f"job {job} running", lambda: slurm_cluster.job_state(job) == "RUNNING")
        yield job
    finally:
        slurm_cluster.run(["scancel", str(job)])
        slurm_cluster.wait_job(job)
        wait_for(f"job {job}'s processes gone", lambda: not slurm_cluster.job_processes(job))


def test_srun_from_this_machine_runs_one_task_on_each_node(slurm_cluster):
    out = slurm_cluster.run(["srun", "--nodes=3", "--ntasks-per-node=1", "hostname"])
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.split()) == sorted(slurm_cluster.node_names)


def test_a_batch_job_runs_on_node1_and_its_srun_reaches_every_node(slurm_cluster, tmp_path):
    node1 = slurm_cluster.nodes.nodes["node1"]
    body = """
address=$(ip -4 -o addr show eth0 | awk '{print $4}')
echo "batch $(hostname) $SLURMD_NODENAME $SLURM_JOB_NODELIST $SLURM_CPUS_ON_NODE $address"
FOO=bar srun --overlap --nodes=3 --ntasks-per-node=1 --label sh -c 'echo "task $(hostname) \\
$SLURMD_NODENAME $SLURM_PROCID $SLURM_NODEID $SLURM_JOB_NODELIST $SLURM_CPUS_ON_NODE $FOO"'
"""
    script = write_script(tmp_path / "job.sh", body, "--nodes=3", f"--output={tmp_path}/out-%j")
    job = slurm_cluster.sbatch(script)
    assert slurm_cluster.wait_job(job) == "COMPLETED"
    lines = (tmp_path / f"out-{job}").read_text().splitlines()
    nodelist = f"{slurm_cluster.prefix}-node[1-3]"
    # The batch script runs on node1, in its namespace (its address), with its hostname.
    assert lines[0] == f"batch {node1.netns} {node1.netns} {nodelist} 1 {node1.address}/27"
    tasks = sorted(line.split(": ", 1)[1] for line in lines[1:])
    assert tasks == [
        f"task {name} {name} {rank} {rank} {nodelist} 1 bar"
        for rank, name in enumerate(slurm_cluster.node_names)
    ]


def test_scancel_leaves_nothing_of_the_job_on_any_node(slurm_cluster, tmp_path):
    body = " ".join(STEP) + " sleep 300"
    script = write_script(tmp_path / "job.sh", body, "--nodes=3", f"--output={tmp_path}/out-%j")
    job = slurm_cluster.sbatch(script)
    try:
        running = wait_for("a task on every node",
                           lambda: len(tasks_running(slurm_cluster, job, "300")) == 3)  # fmt: skip
        assert running
        out = slurm_cluster.run(["scancel", str(job)])
        assert out.returncode == 0, out.stderr
        assert slurm_cluster.wait_job(job) == "CANCELLED"
        wait_for("the job's processes gone", lambda: not slurm_cluster.job_processes(job))
    finally:
        slurm_cluster.run(["scancel", str(job)])
    # What each namespace still runs: its sshd and its slurmd, nothing else.
    daemons = slurm_cluster.daemons()
    for i, node in enumerate(slurm_cluster.nodes.nodes, 1):
        sshd = int((slurm_cluster.nodes.state_dir / f"node{i}" / "sshd.pid").read_text())
        slurmd = daemons[slurm_cluster.slurm_name(node)].pid
        left = {pid for pid in slurm_cluster.namespace_pids(node)
                if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE}
        assert left == {sshd, slurmd}, [psutil.Process(p).cmdline() for p in left - {sshd, slurmd}]


def test_sbatch_test_only_accepts_a_valid_script_and_refuses_a_job_too_big(slurm_cluster, tmp_path):
    good = write_script(tmp_path / "good.sh", "srun hostname", "--nodes=3", "--time=10")
    out = slurm_cluster.run(["sbatch", "--test-only", str(good)])
    assert out.returncode == 0, out.stderr
    assert re.search(r"to start at .* on nodes \S+ in partition debug", out.stderr), out.stderr
    big = write_script(tmp_path / "big.sh", "srun hostname", "--nodes=4")
    out = slurm_cluster.run(["sbatch", "--test-only", str(big)])
    assert out.returncode != 0
    assert "Requested node configuration is not available" in out.stderr


def test_closing_sruns_stdin_gives_every_task_eof(slurm_cluster, holding_job):
    # --input=all, srun's default when its stdin is not a terminal: a line reaches every task
    # and closing the pipe ends every task's cat.
    proc = subprocess.Popen(
        [*STEP, f"--jobid={holding_job}", "--input=all", "--label",
         "sh", "-c", "cat; echo got-eof"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=slurm_cluster.env,
    )  # fmt: skip
    try:
        out, err = proc.communicate("hello\n", timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert sorted(out.splitlines()) == ["0: got-eof", "0: hello", "1: got-eof", "1: hello",
                                        "2: got-eof", "2: hello"]  # fmt: skip


def test_srun_killed_ends_its_tasks_on_every_node(slurm_cluster, holding_job):
    proc = subprocess.Popen([*STEP, f"--jobid={holding_job}", "sleep", "301"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=slurm_cluster.env)  # fmt: skip
    try:
        tasks = wait_for("a task on every node",
                         lambda: three_tasks(slurm_cluster, holding_job, "301"))
        proc.kill()
        proc.wait(10)
        wait_for("every task gone", lambda: not alive(tasks.values()))
    finally:
        proc.kill()
        proc.wait(10)


def test_one_task_killed_is_reported_by_srun_and_the_others_run_on(slurm_cluster, holding_job):
    proc = subprocess.Popen([*STEP, f"--jobid={holding_job}", "sleep", "302"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=slurm_cluster.env)  # fmt: skip
    try:
        tasks = wait_for("a task on every node",
                         lambda: three_tasks(slurm_cluster, holding_job, "302"))
        node2 = slurm_cluster.slurm_name("node2")
        # Draining a node does not touch a step running there.
        drain = slurm_cluster.run(
            ["scontrol", "update", f"nodename={node2}", "state=drain", "reason=x"]
        )
        assert drain.returncode == 0, drain.stderr
        tasks[node2].kill()
        tasks[node2].wait(10)
        time.sleep(1.0)  # what would end the other tasks has had time to
        assert proc.poll() is None
        others = [t for name, t in tasks.items() if name != node2]
        assert alive(others) == others
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
        assert f"srun: error: {node2}: task 1: Killed" in err.splitlines()
    finally:
        proc.kill()
        proc.communicate(timeout=10)
        slurm_cluster.run(["scontrol", "update", f"nodename={node2}", "state=resume"])


def test_down_and_the_abandoned_sweep_leave_no_daemon_behind(netns_cluster_factory):
    nodes = netns_cluster_factory(2)
    slurm = start_slurm(nodes)
    daemons = slurm.daemons()
    assert set(daemons) == {"slurmctld", "munged", *slurm.node_names}
    slurm.down()
    assert not alive(daemons.values())
    assert not slurm.state_dir.exists()
    # A session killed before its teardown: its owner pid is dead, the next session's sweep
    # takes its Slurm down.
    slurm = start_slurm(nodes)
    daemons = slurm.daemons()
    dead = subprocess.Popen(["true"])
    dead.wait()
    (nodes.state_dir / "owner.pid").write_text(str(dead.pid))
    remove_abandoned_slurm()
    assert not alive(daemons.values())
