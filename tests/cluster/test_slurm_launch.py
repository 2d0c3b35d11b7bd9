"""`rlmesh launch` with provider "slurm", on a real slurmctld and one slurmd per network-
namespace node (tests/cluster/slurm_cluster.py): a job that `rlmesh launch --submit` writes
and submits trains PPO with runners on every node and leaves nothing behind; `rlmesh stack`
sees every process of the running job; `scancel` mid-run leaves no process on any node; a
node drained and its agent killed mid-run is survived as a lost node; `--submit --test-only`
is sbatch's own check; a job larger than the allocation is refused before any agent starts;
the same PPO job on the SSH provider and on Slurm places the same and learns the same."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.cluster.slurm_cluster import SlurmCluster, kill_tree

RLMESH = [sys.executable, "-m", "rlmesh"]
PPO = {"num_env_runners": 3, "num_envs_per_env_runner": 2, "train_batch_size": 1200,
       "minibatch_size": 128, "num_epochs": 4, "lr": 0.0005, "seed": 0,
       "model": {"fcnet_hiddens": [64, 64]}}


def toml_value(v: object) -> str:
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + " }"
    if isinstance(v, bool):
        return "true" if v else "false"
    return json.dumps(v)


def job_table(tmp: Path, name: str, stop: dict, config: dict) -> str:
    return (f'[job]\nrun = "PPO"\nenv = "CartPole-v1"\nlocal_dir = "{tmp / "results"}"\n'
            f'experiment_name = "{name}"\nstop = {toml_value(stop)}\n'
            f"config = {toml_value(config)}\n")


def slurm_file(tmp: Path, name: str, *, stop: dict, config: dict = PPO, nodes: int = 3,
               extra: str = "") -> Path:
    path = tmp / f"{name}.toml"
    path.write_text(f'cluster_name = "{name}"\nprovider = "slurm"\n\n[slurm]\nnodes = {nodes}\n'
                    f'cpus_per_node = 2\ntime = "00:15:00"\npython = "{sys.executable}"\n'
                    f"{extra}\n{job_table(tmp, name, stop, config)}")
    return path


@pytest.fixture
def env(slurm_cluster: SlurmCluster, tmp_path: Path) -> dict[str, str]:
    return {**slurm_cluster.env, "RLMESH_CLUSTERS_DIR": str(tmp_path / "clusters")}


def rlmesh(*args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*RLMESH, *args], capture_output=True, text=True, env=env,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def submit(path: Path, env: dict[str, str]) -> tuple[int, Path]:
    """``rlmesh launch --submit --no-follow``: the Slurm job id and its output file."""
    done = rlmesh("launch", str(path), "--submit", "--no-follow", env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    job = int(done.stdout.strip().splitlines()[-1])
    out = re.search(r"output: (\S+)", done.stderr)
    assert out, done.stderr
    return job, Path(out[1])


def head_state(env: dict[str, str], name: str, key: str, job: int, slurm: SlurmCluster,
               out: Path, timeout: float = 120) -> dict:
    path = Path(env["RLMESH_CLUSTERS_DIR"]) / name / "head.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = json.loads(path.read_text())
            if state.get(key):
                return state
        except (OSError, ValueError):
            pass
        if slurm.job_state(job) in ("COMPLETED", "FAILED", "CANCELLED", ""):
            break
        time.sleep(0.3)
    raise AssertionError(f"no {key} in the head's state (job {slurm.job_state(job)}):\n"
                         f"{out.read_text() if out.exists() else '(no output)'}")


def rlmesh_processes(slurm: SlurmCluster) -> list[psutil.Process]:
    """Every rlmesh Python process on any node (agents, actors, a head); not the daemons
    whose files lie under /tmp/rlmesh-netns-* (sshd, slurmd)."""
    found = []
    for node in slurm.nodes.nodes:
        for pid in slurm.namespace_pids(node):
            try:
                proc = psutil.Process(pid)
                if proc.status() != psutil.STATUS_ZOMBIE and proc.name().startswith("python") \
                        and "rlmesh" in " ".join(proc.cmdline()):
                    found.append(proc)
            except psutil.Error:
                continue
    return found


def wait_clean(slurm: SlurmCluster, job: int, timeout: float = 30) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = slurm.job_processes(job) + rlmesh_processes(slurm)
        if not left:
            return []
        time.sleep(0.3)
    return left


def result_rows(tmp: Path) -> list[dict]:
    files = list((tmp / "results").rglob("result.json"))
    assert len(files) == 1, files
    return [json.loads(line) for line in files[0].read_text().splitlines() if line.strip()]


def placement_lines(text: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("rlmesh: placement of"))
    table = [lines[start]]
    for line in lines[start + 1:]:
        if not line.startswith("  "):
            break
        table.append(line)
    return table


def test_submit_trains_ppo_with_runners_on_every_node_and_leaves_nothing(
        slurm_cluster: SlurmCluster, env: dict[str, str], tmp_path: Path) -> None:
    path = slurm_file(tmp_path, "slsub", stop={"episode_reward_mean": 60,
                                               "training_iteration": 60})
    done = rlmesh("launch", str(path), "--submit", env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    table = placement_lines(done.stdout)
    for node in slurm_cluster.node_names:  # a runner on every node of the allocation
        assert any(l.strip().startswith(node) and "env_runner" in l for l in table), table
    rows = result_rows(tmp_path)
    assert rows[-1]["episode_reward_mean"] >= 60, rows[-1]
    assert rows[-1]["timesteps_total"] > rows[0]["timesteps_total"]
    job = int(re.search(r"submitted Slurm job (\d+)", done.stderr)[1])
    assert slurm_cluster.wait_job(job, 60) == "COMPLETED"
    assert wait_clean(slurm_cluster, job) == []


def test_stack_sees_every_process_and_scancel_leaves_nothing(
        slurm_cluster: SlurmCluster, env: dict[str, str], tmp_path: Path) -> None:
    path = slurm_file(tmp_path, "slcancel", stop={"training_iteration": 100000})
    job, out = submit(path, env)
    try:
        state = head_state(env, "slcancel", "placement", job, slurm_cluster, out)
        assert set(state["agents"]) == set(slurm_cluster.node_names)
        # Training has begun: a result row exists.
        deadline = time.monotonic() + 120
        while not list((tmp_path / "results").rglob("result.json")) or not \
                next((tmp_path / "results").rglob("result.json")).read_text().strip():
            assert time.monotonic() < deadline, out.read_text()
            time.sleep(0.5)
        stacked = rlmesh("stack", str(path), "--json", env=env, timeout=60)
        assert stacked.returncode == 0, stacked.stderr
        entries = json.loads(stacked.stdout)["processes"]
        by_role: dict[str, set[str]] = {}
        for e in entries:
            by_role.setdefault(e["role"], set()).add(e["node"])
        assert by_role.get("NodeAgent") == set(slurm_cluster.node_names), by_role
        runners = [e for e in entries if e["role"] == "EnvRunner"]
        assert len(runners) == 3 and {e["node"] for e in runners} == set(slurm_cluster.node_names)
        # Every rlmesh process on the nodes but the head (the batch step's) is in the stack.
        pids = {(e["node"], e["pid"]) for e in entries}
        head_pid = state["pid"]
        for proc in rlmesh_processes(slurm_cluster):
            if proc.pid == head_pid or "rlmesh launch" in " ".join(proc.cmdline()) \
                    or proc.name() in ("srun", "bash", "slurmstepd"):
                continue
            assert any(pid == proc.pid for _, pid in pids), (proc.pid, proc.cmdline(), pids)
        cancelled = slurm_cluster.run(["scancel", str(job)])
        assert cancelled.returncode == 0, cancelled.stderr
        assert slurm_cluster.wait_job(job, 60) == "CANCELLED"
        assert wait_clean(slurm_cluster, job) == []
    finally:
        slurm_cluster.run(["scancel", str(job)])
        kill_tree(slurm_cluster.job_processes(job))


def test_a_drained_node_whose_agent_dies_is_survived_as_a_lost_node(
        slurm_cluster: SlurmCluster, env: dict[str, str], tmp_path: Path) -> None:
    config = {**PPO, "restart_failed_env_runners": True}
    path = slurm_file(tmp_path, "sldrain", stop={"training_iteration": 14}, config=config)
    job, out = submit(path, env)
    victim = slurm_cluster.node_names[2]
    try:
        head_state(env, "sldrain", "placement", job, slurm_cluster, out)
        deadline = time.monotonic() + 120
        while not list((tmp_path / "results").rglob("result.json")):
            assert time.monotonic() < deadline, out.read_text()
            time.sleep(0.5)
        drained = slurm_cluster.run(["scontrol", "update", f"nodename={victim}", "state=drain",
                                     "reason=rlmesh-test"])
        assert drained.returncode == 0, drained.stderr
        # The node goes: its agent (its task of the agents' step) and everything under it.
        node = next(n for n in slurm_cluster.nodes.nodes if slurm_cluster.slurm_name(n) == victim)
        agents = [psutil.Process(p) for p in slurm_cluster.namespace_pids(node)
                  if "rlmesh.launcher.agent" in " ".join(psutil.Process(p).cmdline())]
        assert agents
        kill_tree(agents)
        assert slurm_cluster.wait_job(job, 400) == "COMPLETED", out.read_text()[-4000:]
        text = out.read_text()
        assert f"[{victim}] node lost" in text, text[-4000:]
        rows = result_rows(tmp_path)
        assert rows[-1]["training_iteration"] == 14
        assert wait_clean(slurm_cluster, job) == []
    finally:
        slurm_cluster.run(["scontrol", "update", f"nodename={victim}", "state=resume"])
        slurm_cluster.run(["scancel", str(job)])
        kill_tree(slurm_cluster.job_processes(job))


def test_data_parallel_learners_on_two_slurm_nodes(slurm_cluster: SlurmCluster,
                                                   env: dict[str, str], tmp_path: Path) -> None:
    """Two learners of a whole node each: their torch.distributed group spans two nodes of
    the allocation, rendezvousing at rank 0's node as under SSH, and PPO learns."""
    config = {**PPO, "num_env_runners": 2, "num_learners": 2, "num_cpus_per_learner": 2}
    path = slurm_file(tmp_path, "sldp", stop={"episode_reward_mean": 60,
                                              "training_iteration": 60}, config=config)
    done = rlmesh("launch", str(path), "--submit", env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    table = placement_lines(done.stdout)
    assert len({l.split()[0] for l in table[1:] if "learner-" in l}) == 2, table
    rows = result_rows(tmp_path)
    assert rows[-1]["episode_reward_mean"] >= 60, rows[-1]


def test_the_head_killed_leaves_nothing_on_any_node(slurm_cluster: SlurmCluster,
                                                    env: dict[str, str], tmp_path: Path) -> None:
    """SIGKILL to the head (`rlmesh launch` in the batch step): srun's stdin closes, which is
    every agent's lifeline; the agents end, their actors with them, and the job ends."""
    path = slurm_file(tmp_path, "slhead", stop={"training_iteration": 100000})
    job, out = submit(path, env)
    try:
        state = head_state(env, "slhead", "placement", job, slurm_cluster, out)
        deadline = time.monotonic() + 120
        while not list((tmp_path / "results").rglob("result.json")):
            assert time.monotonic() < deadline, out.read_text()
            time.sleep(0.5)
        os.kill(state["pid"], signal.SIGKILL)
        assert slurm_cluster.wait_job(job, 60) in ("FAILED", "COMPLETED", "CANCELLED")
        assert wait_clean(slurm_cluster, job) == []
    finally:
        slurm_cluster.run(["scancel", str(job)])
        kill_tree(slurm_cluster.job_processes(job))


def test_submit_test_only_is_sbatchs_own_check(slurm_cluster: SlurmCluster,
                                               env: dict[str, str], tmp_path: Path) -> None:
    path = slurm_file(tmp_path, "sltest", stop={"training_iteration": 1},
                      extra='partition = "debug"')
    done = rlmesh("launch", str(path), "--submit", "--test-only", env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert re.search(r"Job \d+ to start at", done.stdout + done.stderr)
    script = (Path(env["RLMESH_CLUSTERS_DIR"]) / "sltest" / "submit" / "submit.sbatch").read_text()
    assert "#SBATCH --nodes=3" in script and "#SBATCH --partition=debug" in script
    # The template an operator starts a batch script of their own from, as shipped.
    template = Path(__file__).resolve().parents[2] / "launcher" / "slurm" / "job.sbatch"
    checked = slurm_cluster.run(["sbatch", "--test-only", str(template)])
    assert checked.returncode == 0 and "to start at" in checked.stderr, checked.stderr
    # More nodes than the cluster has: sbatch refuses, in one line.
    big = slurm_file(tmp_path, "slbig", stop={"training_iteration": 1}, nodes=5)
    refused = rlmesh("launch", str(big), "--submit", "--test-only", env=env, timeout=60)
    assert refused.returncode == 2
    assert refused.stderr.startswith("rlmesh launch: error: sbatch refused"), refused.stderr


def test_a_job_larger_than_the_allocation_is_refused_before_any_agent_starts(
        slurm_cluster: SlurmCluster, env: dict[str, str], tmp_path: Path) -> None:
    path = slurm_file(tmp_path, "slfit", stop={"training_iteration": 1},
                      config={**PPO, "num_env_runners": 7})
    done = rlmesh("launch", str(path), "--submit", env=env, timeout=300)
    assert done.returncode != 0
    assert "does not fit Slurm job" in done.stdout and "env_runners" in done.stdout, done.stdout
    # No agent ever started: none has a run directory under this test's runs root.
    assert not list(Path(env["RLMESH_RUNS_ROOT"]).rglob("agent-*")), \
        list(Path(env["RLMESH_RUNS_ROOT"]).rglob("agent-*"))
    assert not (tmp_path / "results").exists() or not list((tmp_path / "results").rglob("result.json"))


def test_launch_from_sallocs_shell_on_the_login_machine(slurm_cluster: SlurmCluster,
                                                       env: dict[str, str], tmp_path: Path) -> None:
    """`salloc -N 3 rlmesh launch`: the shell salloc runs is on this machine (the login
    node), no node of the allocation; the head runs here, on this machine's address on the
    route to the nodes, and the agents join it from the nodes."""
    path = slurm_file(tmp_path, "slalloc", stop={"training_iteration": 2})
    done = subprocess.run(["salloc", "-N", "3", "--cpus-per-task=2", *RLMESH, "launch",
                           str(path)], env=env, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    table = placement_lines(done.stdout + done.stderr)
    for node in slurm_cluster.node_names:
        assert any(l.strip().startswith(node) and "env_runner" in l for l in table), table
    assert result_rows(tmp_path)[-1]["training_iteration"] == 2


def test_outside_an_allocation_is_one_line(tmp_path: Path) -> None:
    path = slurm_file(tmp_path, "slout", stop={"training_iteration": 1})
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    done = rlmesh("launch", str(path), env={**env, "RLMESH_CLUSTERS_DIR": str(tmp_path / "c")},
                  timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("rlmesh launch: error: provider "
                                                           "'slurm' needs a Slurm allocation")


def ssh_file(tmp: Path, name: str, nodes, *, stop: dict, config: dict) -> Path:
    """The same job over SSH, on netns nodes named as Slurm names them (their hostnames)."""
    entries = "\n".join(f'[[nodes]]\nname = "{n.netns}"\nhost = "{n.address}"\n'
                        "resources = { CPU = 2 }\n" for n in nodes.nodes.values())
    path = tmp / f"{name}.toml"
    path.write_text(f'cluster_name = "{name}"\n[ssh]\nuser = "root"\n'
                    f'identity_file = "{nodes.identity_file}"\nknown_hosts = "{nodes.known_hosts}"\n'
                    f'python = "{sys.executable}"\n[head]\nhost = "{nodes.bridge_address}"\n'
                    f"{entries}\n{job_table(tmp, name, stop, config)}")
    return path


def test_the_same_job_on_ssh_and_on_slurm_places_and_learns_the_same(
        slurm_cluster: SlurmCluster, env: dict[str, str], tmp_path: Path) -> None:
    """Seeds fixed, one learner: the same placement, the same env steps to the target, row
    for row, and the same rewards. (Two
    data-parallel learners split each batch by arrival, so their rows differ run to run on
    any provider; test_data_parallel_learners_on_two_slurm_nodes trains them.)"""
    stop = {"episode_reward_mean": 100, "training_iteration": 60}
    config = PPO
    runs = {}
    for provider in ("ssh", "slurm"):
        tmp = tmp_path / provider
        tmp.mkdir()
        if provider == "ssh":
            path = ssh_file(tmp, "same-ssh", slurm_cluster.nodes, stop=stop, config=config)
            done = rlmesh("launch", str(path), env=env, timeout=600)
        else:
            path = slurm_file(tmp, "same-slurm", stop=stop, config=config)
            done = rlmesh("launch", str(path), "--submit", env=env, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        rows = result_rows(tmp)
        runs[provider] = (placement_lines(done.stdout + done.stderr), rows)
    (ssh_table, ssh_rows), (slurm_table, slurm_rows) = runs["ssh"], runs["slurm"]
    assert ssh_table == slurm_table
    assert ssh_rows[-1]["episode_reward_mean"] >= 100
    assert [r["timesteps_total"] for r in ssh_rows] == [r["timesteps_total"] for r in slurm_rows]
    # The same samples and updates; a mean over the episodes done by the report may take in
    # one episode more or less (seen: 100.49 against 100.48).
    assert [r["episode_reward_mean"] for r in ssh_rows] == pytest.approx(
        [r["episode_reward_mean"] for r in slurm_rows], rel=0.02)
    shutil.rmtree(Path.home() / ".rlmesh" / "clusters" / "same-ssh", ignore_errors=True)
