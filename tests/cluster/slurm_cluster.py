"""A real Slurm on the netns nodes (deploy/slurm-netns.sh): one slurmctld on this machine, one
slurmd inside each node's network namespace with the node's hostname, and a munged of its own;
the ``slurm_cluster`` fixture starts it on a netns cluster of its own and takes both down in a
``finally``; a session killed before that is cleaned up by the next one.

Clients (sbatch, srun, squeue, scontrol, scancel, sinfo) find the cluster through
``SLURM_CONF`` (``SlurmCluster.env``), from this machine or from inside a node (a batch script
on node1 inherits it). Slurm's node names are the nodes' hostnames (``<prefix>-node1`` ...,
``Node.netns``), as on a real cluster; ``SlurmCluster.slurm_name("node1")`` maps.

What was measured on these nodes (slurm-wlm 22.05.8, Debian 12, proctrack/linuxproc, one
``srun --overlap --nodes=3 --ntasks-per-node=1`` step run from inside a ``--nodes=3`` batch
job), and what a Slurm provider can rely on:

1. stdin: srun's default is ``--input=all`` (every task gets what srun reads, while srun's
   stdin is not a terminal); closing srun's stdin gives every task EOF (``cat; echo got-eof``
   ends on all three). ``--input=0``: task 0 gets the data, the others EOF at once. srun with
   stdin=/dev/null: every task EOF at once.
2. srun SIGKILLed: the step's tasks on every node are gone within ~20 ms. What ends them is
   srun's second process, a child srun ("shepherd", same command line, same process group)
   that cancels the step when its parent dies: SIGKILL to srun's whole process group (srun
   and shepherd at once) leaves every task running (10 s watched) until the job ends or is
   scancel'ed. So stop a step by signalling srun itself (or scancel JOB.STEP), never by
   killpg. SIGTERM or SIGHUP to srun: the tasks end in ~20-40 ms, srun exits 137 after
   "srun: forcing job termination" and one "srun: error: NODE: task N: Killed" a task. One
   SIGINT: srun only prints the step's status ("srun: interrupt (one more within 1 sec to
   abort)"), nothing ends; two SIGINTs within 1 s: the tasks get SIGINT, srun exits 130.
3. One node's task killed (kill -9): srun prints exactly ``srun: error: <NodeName>: task <N>:
   Killed`` (``... task <N>: Exited with exit code <C>`` for an exit), and the other tasks keep
   running, srun with them (KillOnBadExit=0, --wait=0 are the defaults);
   ``--kill-on-bad-exit=1`` ends the step instead (srun exits 143). Killing that node's
   slurmstepd instead (-9; it ignores SIGTERM) is NOT a clean node loss: its task is
   reparented to init and keeps running, srun notices nothing (20 s watched), the step stays
   listed, and the orphan outlives the job's end (only netns-cluster.sh down kills it): to
   lose one node of a step, kill its task. ``scontrol update nodename=X state=drain
   reason=x`` alone does not touch a running step (the node shows "drng", the tasks run on).
4. A task's environment: SLURM_PROCID=0..2 and SLURM_NODEID=0..2 in node order,
   SLURMD_NODENAME=<prefix>-nodeI (= ``hostname``), SLURM_JOB_NODELIST and
   SLURM_STEP_NODELIST=<prefix>-node[1-3], SLURM_CPUS_ON_NODE=1 (a ``--nodes=3`` job gets one
   CPU a node; ask ``--exclusive`` or ``--cpus-per-task`` for more; each node declares CPUs=2),
   SLURM_JOB_CPUS_PER_NODE=1(x3), SLURM_STEP_ID=the step's number, SLURM_LOCALID=0,
   SLURM_NNODES=3, SLURM_NTASKS=3, SLURM_LAUNCH_NODE_IPADDR/SLURM_SRUN_COMM_HOST=the address
   srun ran at (node1's for a batch job), SLURM_CONF passed on. srun's own environment reaches
   the tasks (``FOO=1 srun ...``: FOO=1 in every task; --export=ALL is the default).
5. ``slurm-netns.sh up`` on 3 nodes takes ~0.3 s (every node idle) after the netns cluster
   (~1 s); ``down`` ~0.6 s; a trivial ``srun -N3 true`` ~35-40 ms; a batch job is RUNNING
   0.02-0.9 s after sbatch (longer right after another job on the same nodes).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
import pytest

if TYPE_CHECKING:
    from tests.cluster.conftest import NetnsCluster

# tests/cluster/conftest.py imports this module's fixture, so this module imports conftest
# only inside functions: either may be imported first.

SLURM_SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "slurm-netns.sh"
# What slurm-netns.sh needs, by the Debian package that has it.
SLURM_TOOLS = {
    "slurmctld": "slurmctld", "slurmd": "slurmd", "munged": "munge", "srun": "slurm-client",
    "sbatch": "slurm-client", "scontrol": "slurm-client", "sinfo": "slurm-client",
    "squeue": "slurm-client", "scancel": "slurm-client",
}  # fmt: skip
# Job states after which nothing of a job runs any more.
FINISHED_STATES = {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                   "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}  # fmt: skip


def run_slurm_script(*args: str, check: bool = True,
                     timeout: float = 90) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["bash", str(SLURM_SCRIPT), *args], capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip
    if check and proc.returncode != 0:
        raise RuntimeError(f"slurm-netns.sh {' '.join(args)} failed ({proc.returncode}):\n"
                           f"{proc.stdout}{proc.stderr}")  # fmt: skip
    return proc


class SlurmCluster:
    """Slurm running on ``nodes``: how to reach it, its daemons, and teardown."""

    def __init__(self, nodes: NetnsCluster) -> None:
        self.nodes = nodes
        self.prefix = nodes.prefix
        self.state_dir = nodes.state_dir / "slurm"
        self.conf = self.state_dir / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """This process's environment with SLURM_CONF: for every Slurm client run."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    @property
    def node_names(self) -> list[str]:
        """Slurm's node names, in node order (the nodes' hostnames)."""
        return [node.netns for node in self.nodes.nodes.values()]

    def slurm_name(self, node: str) -> str:
        """Slurm's name of netns node ``node`` ("node1" -> "<prefix>-node1")."""
        return self.nodes.nodes[node].netns

    def run(self, argv: Sequence[str], timeout: float = 30.0,
            **kwargs: Any) -> subprocess.CompletedProcess[str]:
        """A Slurm client command from this machine; never raises on a non-zero exit."""
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              env=self.env, stdin=subprocess.DEVNULL, check=False,
                              **kwargs)  # fmt: skip

    def sbatch(self, script: Path, *options: str) -> int:
        """Submit ``script``; its job id."""
        out = self.run(["sbatch", "--parsable", *options, str(script)])
        if out.returncode != 0:
            raise RuntimeError(f"sbatch {script} failed: {out.stderr.strip()}")
        return int(out.stdout.strip().split(";")[0])

    def job_state(self, job: int) -> str:
        """The job's state ("PENDING", "RUNNING", "COMPLETED", ...); "" once Slurm forgot it."""
        out = self.run(["scontrol", "show", "job", "-o", str(job)])
        found = re.search(r"\bJobState=(\S+)", out.stdout)
        return found.group(1) if found else ""

    def wait_job(self, job: int, timeout: float = 30.0) -> str:
        """Until the job has finished; its final state."""
        deadline = time.monotonic() + timeout
        while (state := self.job_state(job)) not in FINISHED_STATES and state:
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job} still {state} after {timeout} s")
            time.sleep(0.1)
        return state

    def daemons(self) -> dict[str, psutil.Process]:
        """The daemons slurm-netns.sh started and that still run, by "slurmctld", "munged"
        and Slurm node name (its slurmd)."""
        files = {
            "slurmctld": self.state_dir / "ctld" / "slurmctld.pid",
            "munged": self.state_dir / "munge" / "munged.pid",
            **{name: self.state_dir / name / "slurmd.pid" for name in self.node_names},
        }
        found = {}
        for name, path in files.items():
            try:
                found[name] = psutil.Process(int(path.read_text()))
            except (OSError, ValueError, psutil.NoSuchProcess):
                continue
        return found

    def namespace_pids(self, node: str) -> set[int]:
        """Every process in netns node ``node``'s network namespace."""
        out = subprocess.run(["ip", "netns", "pids", self.nodes.nodes[node].netns],
                             capture_output=True, text=True, check=True)  # fmt: skip
        return {int(pid) for pid in out.stdout.split()}

    def job_processes(self, job: int) -> list[psutil.Process]:
        """Live processes of ``job`` on any node: its step daemons ("slurmstepd: [JOB.STEP]")
        and every process whose environment says SLURM_JOB_ID=JOB (tasks and their
        children)."""
        marker = f"SLURM_JOB_ID={job}".encode()
        found = []
        for node in self.nodes.nodes:
            for pid in self.namespace_pids(node):
                try:
                    proc = psutil.Process(pid)
                    if proc.status() == psutil.STATUS_ZOMBIE:
                        continue
                    if proc.name() == "slurmstepd":
                        if f"[{job}." in " ".join(proc.cmdline()):
                            found.append(proc)
                        continue
                    with open(f"/proc/{pid}/environ", "rb") as environ:
                        if marker in environ.read().split(b"\0"):
                            found.append(proc)
                except (OSError, psutil.Error):
                    continue
        return found

    def down(self) -> None:
        run_slurm_script("down", "--prefix", self.prefix)


def start_slurm(nodes: NetnsCluster) -> SlurmCluster:
    """Slurm on the running netns cluster ``nodes``, every node idle."""
    try:
        run_slurm_script("up", "--prefix", nodes.prefix)
    except BaseException:
        run_slurm_script("down", "--prefix", nodes.prefix, check=False)
        raise
    return SlurmCluster(nodes)


def remove_abandoned_slurm() -> None:
    """Take down the Slurm of test clusters whose pytest died before its teardown: its
    slurmctld and munged run in this machine's namespace, where the netns cluster's own
    down (remove_abandoned_clusters) does not look."""
    from tests.cluster.conftest import STATE_ROOT, TEST_PREFIX

    # A daemon's command line names its cluster's files: slurm.conf (slurmctld, slurmd) or
    # the munge socket (munged), both under the cluster's state dir.
    daemon_path = re.compile(
        re.escape(str(STATE_ROOT)) + rf"/rlmesh-netns-({re.escape(TEST_PREFIX)}[a-z0-9-]*)/slurm/"
    )
    prefixes = set()
    for proc in psutil.process_iter(["name", "cmdline"]):
        if proc.info["name"] not in ("slurmctld", "slurmd", "munged"):
            continue
        found = daemon_path.search(" ".join(proc.info["cmdline"] or ()))
        if found:
            prefixes.add(found.group(1))
    for prefix in prefixes:
        try:
            owner = int((STATE_ROOT / f"rlmesh-netns-{prefix}" / "owner.pid").read_text())
        except (OSError, ValueError):
            owner = None
        if owner is None or not psutil.pid_exists(owner):
            run_slurm_script("down", "--prefix", prefix, check=False)


def slurm_unavailable_reason() -> str | None:
    missing = sorted({package for tool, package in SLURM_TOOLS.items()
                      if not (shutil.which(tool) or os.access(f"/usr/sbin/{tool}", os.X_OK))})
    if missing:
        return (f"Slurm not installed (apt-get install --no-install-recommends slurm-wlm munge;"
                f" missing: {', '.join(missing)})")
    return None


def require_slurm() -> None:
    from tests.cluster.conftest import require_netns, skip_unless

    require_netns()
    skip_unless(slurm_unavailable_reason(), "the Slurm tests")


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """Slurm on three netns nodes of its own for the whole session; both taken down at its
    end whatever happened."""
    from tests.cluster.conftest import remove_abandoned_clusters, start_cluster

    require_slurm()
    remove_abandoned_slurm()
    remove_abandoned_clusters()
    nodes = start_cluster(3)
    try:
        slurm = start_slurm(nodes)
        try:
            yield slurm
        finally:
            slurm.down()
    finally:
        nodes.down()


def kill_tree(procs: Sequence[psutil.Process], sig: int = signal.SIGKILL) -> None:
    """Signal ``procs`` and everything under them (a test's last resort on failure)."""
    every: list[psutil.Process] = []
    for proc in procs:
        try:
            every += [proc, *proc.children(recursive=True)]
        except psutil.Error:
            continue
    for proc in every:
        try:
            proc.send_signal(sig)
        except psutil.Error:
            continue
