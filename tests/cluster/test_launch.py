"""`rlmesh launch` on three nodes in network namespaces, each with its own sshd: an IMPALA
job learns with its learner on one node and runners on the others; `rlmesh status` and
`rlmesh stack` see every process on every node; a node killed mid-run loses its runners to
the others and training goes on; a launcher killed with SIGKILL leaves every node clean; a
process without the cluster's CURVE keys cannot talk to an agent; a [job] with a grid runs as
a sweep whose trials' actors the scheduler places on the nodes, a trial that does not fit
waiting; a script with a lambda is one line before anything starts."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import zmq

from rlmesh.wire import codec, messages as M

RLMESH = [sys.executable, "-m", "rlmesh"]


def cluster_file(tmp: Path, cluster, *, stop: dict, runners: int = 2, job: str = "",
                 run: str = "IMPALA", algo_settings: dict | None = None, **config) -> Path:
    """A cluster file for the fixture's nodes; the head is this machine's bridge address.
    ``algo_settings`` replaces the IMPALA settings below (another algorithm's)."""
    name = f"t{secrets.token_hex(3)}"
    nodes = "\n".join(f'[[nodes]]\nname = "{n}"\nhost = "{cluster.nodes[n].address}"\n'
                      f"resources = {{ CPU = 2, GPU = 0 }}\n" for n in cluster.names)
    settings = {"num_env_runners": runners, "num_envs_per_env_runner": 4, "num_learners": 1,
                "lr": 0.001, "num_sgd_iter": 2, "minibatch_buffer_size": 2,
                "vf_loss_coeff": 0.5, "entropy_coeff": 0.0, "min_time_s_per_reporting": 1,
                "model": {"fcnet_hiddens": [64, 64], "vf_share_layers": False}, **config}
    if algo_settings is not None:
        settings = {"num_env_runners": runners, **algo_settings, **config}
    text = f'''cluster_name = "{name}"
[ssh]
user = "{cluster.user}"
identity_file = "{cluster.identity_file}"
known_hosts = "{cluster.known_hosts}"
connect_timeout_s = 5
python = "{sys.executable}"
[head]
host = "{cluster.bridge_address}"
{nodes}
[job]
run = "{run}"
env = "CartPole-v1"
local_dir = "{tmp / 'results'}"
experiment_name = "{name}"
stop = {json.dumps(stop).replace(":", " =")}
config = {_toml_table(settings)}
{job}
'''
    path = tmp / "cluster.toml"
    path.write_text(text)
    return path


def _toml_table(d: dict) -> str:
    def value(v):
        if isinstance(v, dict):
            return _toml_table(v)
        if isinstance(v, bool):
            return "true" if v else "false"
        return json.dumps(v)
    return "{ " + ", ".join(f"{k} = {value(v)}" for k, v in d.items()) + " }"


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("RLMESH_CLUSTERS_DIR", str(tmp_path / "clusters"))
    yield {**os.environ}
    # The nodes share this machine's files: what the launcher put in their home folders
    # (the cluster's keys, ~/.rlmesh/clusters/<name>/) is here too.
    for cluster_toml in tmp_path.glob("cluster.toml"):
        name = cluster_toml.read_text().split('"')[1]
        shutil.rmtree(Path.home() / ".rlmesh" / "clusters" / name, ignore_errors=True)


def rlmesh(*args, env, timeout=60) -> subprocess.CompletedProcess:
    return subprocess.run([*RLMESH, *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def wait_for_state(path: Path, key: str, launch: subprocess.Popen, timeout: float = 90,
                   where: str | None = None) -> dict:
    """The head's state file once it has ``key`` (holding ``where``, if given)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and launch.poll() is None:
        try:
            state = json.loads(path.read_text())
            if state.get(key) and (where is None or where in state[key]):
                return state
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    launch.kill()
    out = launch.communicate()[0] if launch.stdout is not None else ""
    raise AssertionError(f"no {key} in {path} (launch exit {launch.returncode}):\n{out}")


def kill_node(cluster, node: str) -> None:
    """The node dies: every process of its namespace (sshd, agent, actors) killed."""
    pids = subprocess.run(["ip", "netns", "pids", cluster.nodes[node].netns],
                          capture_output=True, text=True).stdout.split()
    for pid in pids:
        os.kill(int(pid), signal.SIGKILL)


def results(tmp: Path) -> list[dict]:
    (result,) = (tmp / "results").glob("*/*/result.json")
    return [json.loads(line) for line in result.read_text().splitlines()]


def test_launch_learns_with_status_stack_and_curve(tmp_path, netns_cluster, env):
    # Long enough for the checks below to see the run; it learns long before the end.
    path = cluster_file(tmp_path, netns_cluster, stop={"training_iteration": 15})
    name = path.read_text().split('"')[1]
    launch = subprocess.Popen([*RLMESH, "launch", str(path)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env=env)
    try:
        state = wait_for_state(tmp_path / "clusters" / name / "head.json", "placement", launch)
        placement = state["placement"]
        learner_node = placement["learner-0"]
        assert learner_node in netns_cluster.names
        assert {placement["env_runner-1"], placement["env_runner-2"]} <= set(netns_cluster.names)
        deadline = time.monotonic() + 60
        while True:  # until every actor is up
            status = rlmesh("status", str(path), "--json", env=env)
            assert status.returncode == 0, status.stderr
            nodes = json.loads(status.stdout)["nodes"]
            running = {r["name"]: node for node, records in nodes.items() for r in records}
            if {"learner-0", "env_runner-1", "env_runner-2"} <= set(running):
                break
            assert time.monotonic() < deadline, running
            time.sleep(0.5)
        assert running["learner-0"] == learner_node
        learner = next(r for r in nodes[learner_node] if r["name"] == "learner-0")
        # It answers its heartbeat; its loop may be flagged blocked for a moment (the update
        # thread holds the GIL through torch's first steps on a loaded machine).
        assert learner["state"] in ("running", "blocked") and learner["heartbeat_ms"] > 0
        text = rlmesh("status", str(path), env=env)
        assert "learner-0" in text.stdout and "heartbeat" in text.stdout, text.stderr
        assert re.search(rf"{learner_node}: CPU [12] of 2 used", text.stdout), text.stdout
        # each process's heartbeat age, as the head's supervisor sees it (rewritten every 2 s)
        ages = wait_for_state(tmp_path / "clusters" / name / "head.json", "heartbeat_age_s",
                              launch, timeout=10, where="learner-0")["heartbeat_age_s"]
        assert 0 <= ages["learner-0"] < 5, ages
        assert all(f"agent-{n}" in running for n in netns_cluster.names)
        stack = rlmesh("stack", str(path), "--json", env=env)
        assert stack.returncode == 0, stack.stderr
        entries = json.loads(stack.stdout)["processes"]
        assert {e["node"] for e in entries} == set(netns_cluster.names)
        assert {"Learner", "EnvRunner", "NodeAgent"} <= {e["role"] for e in entries}
        # Without the cluster's keys, an agent does not even answer a HELLO.
        agent = state["agents"][learner_node]
        ctx = zmq.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(agent)
        sock.send_multipart(codec.encode(M.make(M.HELLO, id=1)))
        assert not sock.poll(1500)
        sock.close()
        ctx.term()
        out, _ = launch.communicate(timeout=240)
    finally:
        if launch.poll() is None:
            launch.kill()
    assert launch.returncode == 0, out
    rows = results(tmp_path)
    best = max(r["episode_reward_mean"] for r in rows)
    assert best >= 150, best
    assert rows[-1]["num_healthy_env_runners"] == 2


def test_a_dead_node_loses_its_runner_to_the_others(tmp_path, netns_cluster, env):
    path = cluster_file(tmp_path, netns_cluster, runners=2,
                        stop={"training_iteration": 14, "timesteps_total": 10000000})
    name = path.read_text().split('"')[1]
    launch = subprocess.Popen([*RLMESH, "launch", str(path)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env=env)
    try:
        state = wait_for_state(tmp_path / "clusters" / name / "head.json", "placement", launch)
        placement = state["placement"]
        victim = next(placement[r] for r in ("env_runner-1", "env_runner-2")
                      if placement[r] != placement["learner-0"])
        time.sleep(4)  # a few iterations first
        kill_node(netns_cluster, victim)
        out, _ = launch.communicate(timeout=240)
    finally:
        if launch.poll() is None:
            launch.kill()
        netns_cluster.restart_sshd(victim)
    assert launch.returncode == 0, out
    assert "node lost" in out
    rows = results(tmp_path)
    assert rows[-1]["training_iteration"] == 14
    assert rows[-1]["num_env_runner_restarts"] >= 1
    assert rows[-1]["num_healthy_env_runners"] == 2
    assert rows[-1]["timesteps_total"] > rows[-5]["timesteps_total"]  # sampling went on


def test_ars_spreads_its_runners_over_the_nodes_with_no_learner(tmp_path, netns_cluster, env):
    # ES and ARS scale out as env runners do: the runners go to the nodes, each makes or
    # maps its node's noise table, and the driver on the head applies the updates.
    ars = {"num_rollouts": 8, "rollouts_used": 8, "noise_stdev": 0.05, "sgd_stepsize": 0.02,
           "eval_prob": 0.2, "noise_size": 1_000_000, "observation_filter": "MeanStdFilter",
           "metrics_num_episodes_for_smoothing": 10, "model": {"fcnet_hiddens": []}}
    path = cluster_file(tmp_path, netns_cluster, run="ARS", algo_settings=ars,
                        stop={"episode_reward_mean": 150, "training_iteration": 80})
    name = path.read_text().split('"')[1]
    launch = subprocess.Popen([*RLMESH, "launch", str(path)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env=env)
    try:
        state = wait_for_state(tmp_path / "clusters" / name / "head.json", "placement", launch)
        out, _ = launch.communicate(timeout=240)
    finally:
        if launch.poll() is None:
            launch.kill()
    placement = state["placement"]
    assert {placement["env_runner-1"], placement["env_runner-2"]} <= set(netns_cluster.names)
    assert not any(actor.startswith("learner") for actor in placement)
    assert launch.returncode == 0, out
    rows = results(tmp_path)
    assert rows[-1]["episode_reward_mean"] >= 150, [r["episode_reward_mean"] for r in rows]


def test_a_killed_launcher_leaves_every_node_clean(tmp_path, netns_cluster, env, runs_root):
    path = cluster_file(tmp_path, netns_cluster,
                        stop={"timesteps_total": 100000000})
    name = path.read_text().split('"')[1]
    launch = subprocess.Popen([*RLMESH, "launch", str(path)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env=env)
    try:
        wait_for_state(tmp_path / "clusters" / name / "head.json", "placement", launch)
        time.sleep(2)
        assert len(mesh_processes(runs_root)) >= 5  # agents, learner, runners
    finally:
        launch.kill()  # SIGKILL: no teardown of its own
    launch.wait(10)
    deadline = time.monotonic() + 20
    while (left := mesh_processes(runs_root)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, [p.info["cmdline"] for p in left]
    down = rlmesh("down", str(path), env=env)
    assert down.returncode == 0, down.stdout + down.stderr


def mesh_processes(root: Path) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and any(
                    str(root) in a for a in p.info["cmdline"] or ()):
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def kill_learners_node_after_a_checkpoint(path: Path, cluster, env, learner: str,
                                          checkpoint_timeout: float = 60) -> tuple[int, str]:
    """Launch ``path``, kill the node of ``learner`` once checkpoint 2 exists, restart that
    node's sshd afterwards; the launcher's exit code and output."""
    name = path.read_text().split('"')[1]
    launch = subprocess.Popen([*RLMESH, "launch", str(path)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env=env)
    victim = None
    try:
        state = wait_for_state(path.parent / "clusters" / name / "head.json", "placement", launch)
        deadline = time.monotonic() + checkpoint_timeout
        while not list((path.parent / "results").glob("*/*/checkpoint_000002")):
            assert time.monotonic() < deadline and launch.poll() is None
            time.sleep(0.2)
        victim = state["placement"][learner]
        kill_node(cluster, victim)
        out, _ = launch.communicate(timeout=120)
    finally:
        if launch.poll() is None:
            launch.kill()
        if victim is not None:
            cluster.restart_sshd(victim)
    return launch.returncode, out


def test_losing_the_learners_node_stops_the_job_naming_the_checkpoint(tmp_path, netns_cluster,
                                                                      env):
    path = cluster_file(tmp_path, netns_cluster, stop={"training_iteration": 1000},
                        job="checkpoint_freq = 1")
    code, out = kill_learners_node_after_a_checkpoint(path, netns_cluster, env, "learner-0")
    assert code == 1, out
    assert "learner-0" in out and "the last checkpoint is" in out and "--resume" in out


def test_a_job_that_does_not_fit_is_an_error_naming_the_bundle(tmp_path, netns_cluster, env):
    path = cluster_file(tmp_path, netns_cluster, stop={"training_iteration": 1},
                        num_gpus_per_learner=1)
    done = rlmesh("launch", str(path), env=env, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "learner-0" in done.stderr and "GPU" in done.stderr
    assert "training_iteration" not in done.stdout  # nothing trained


def test_up_status_exec_and_down(tmp_path, netns_cluster, env, runs_root):
    path = cluster_file(tmp_path, netns_cluster, stop={"training_iteration": 1})
    name = path.read_text().split('"')[1]
    ran = rlmesh("exec", str(path), "--", "hostname", env=env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    for node in netns_cluster.names:
        assert f"[{node}] {netns_cluster.nodes[node].netns}" in ran.stdout
    up = subprocess.Popen([*RLMESH, "up", str(path)], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, env=env)
    try:
        state = wait_for_state(tmp_path / "clusters" / name / "head.json", "agents", up)
        assert set(state["agents"]) == set(netns_cluster.names)
        status = rlmesh("status", str(path), "--json", env=env)
        nodes = json.loads(status.stdout)["nodes"]
        assert {r["name"] for records in nodes.values() for r in records} == {
            f"agent-{n}" for n in netns_cluster.names}
        down = rlmesh("down", str(path), env=env)
        assert down.returncode == 0, down.stdout + down.stderr
        assert up.wait(20) == 0
    finally:
        if up.poll() is None:
            up.kill()
    deadline = time.monotonic() + 10
    while mesh_processes(runs_root) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not mesh_processes(runs_root)
    assert rlmesh("status", str(path), env=env).returncode == 1  # no head any more


def test_ctrl_c_and_a_frozen_head_leave_every_node_clean(tmp_path, netns_cluster, env,
                                                         runs_root):
    """Ctrl-C: the launcher tears down and exits 130. A head that stops answering (frozen
    here with SIGSTOP, its SSH sessions still open, as when its machine hangs): the agents
    notice the missing heartbeats and take everything down."""
    path = cluster_file(tmp_path, netns_cluster, stop={"timesteps_total": 100000000})
    name = path.read_text().split('"')[1]
    state_file = tmp_path / "clusters" / name / "head.json"
    launch = subprocess.Popen([*RLMESH, "launch", str(path)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              env={**env, "PYTHONFAULTHANDLER": "1"})
    try:
        wait_for_state(state_file, "placement", launch)
        time.sleep(2)
        launch.send_signal(signal.SIGINT)
        try:
            out, _ = launch.communicate(timeout=60)
        except subprocess.TimeoutExpired:  # fail with what it printed, to see where it hung
            launch.send_signal(signal.SIGABRT)  # PYTHONFAULTHANDLER: every thread's stack
            time.sleep(2)
            launch.kill()
            out, _ = launch.communicate(timeout=10)
            raise AssertionError(f"rlmesh launch not gone 60 s after Ctrl-C:\n{out}") from None
    finally:
        if launch.poll() is None:
            launch.kill()
    assert launch.returncode == 130, out
    assert not mesh_processes(runs_root)

    frozen_env = {**env, "RLMESH_HEAD_SILENCE_S": "4"}
    launch = subprocess.Popen([*RLMESH, "launch", str(path)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env=frozen_env,
                              start_new_session=True)
    try:
        wait_for_state(state_file, "placement", launch)
        time.sleep(2)
        head = psutil.Process(launch.pid)
        frozen = [head, *head.children(recursive=True)]
        for p in frozen:  # the head and everything it runs here, ssh clients included
            p.suspend()
        remote = [p for p in mesh_processes(runs_root) if p.pid not in {f.pid for f in frozen}]
        assert remote, "no agent or actor on the nodes"
        gone, alive = psutil.wait_procs(remote, timeout=30)
        assert not alive, [p.cmdline() for p in alive]
    finally:
        os.killpg(launch.pid, signal.SIGKILL)
        launch.wait(10)


def test_launch_runs_a_sweep_with_each_trials_actors_on_the_nodes(tmp_path, netns_cluster, env):
    """A [job] with a grid runs as a sweep on the head: each trial's learner and runners are
    placed by the scheduler on the nodes, counting what the other trial holds."""
    path = cluster_file(tmp_path, netns_cluster, runners=2, stop={"training_iteration": 3},
                        lr={"grid_search": [0.001, 0.0005]})
    name = path.read_text().split('"')[1]
    done = rlmesh("launch", str(path), env=env, timeout=400)
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(re.findall(r"scheduler: \S+ placed on ", done.stdout + done.stderr)) == 2
    exp = tmp_path / "results" / name
    state = json.loads((exp / "experiment_state.json").read_text())
    trials = state["trials"]
    assert [t["status"] for t in trials] == ["TERMINATED", "TERMINATED"], trials
    held: dict[str, int] = {}
    for t in trials:
        log = (Path(t["dir"]) / "trial.log").read_text()
        placed = json.loads(re.search(r"placement on the cluster: (\{.*\})", log).group(1))
        assert set(placed) == {"learner-0", "env_runner-1", "env_runner-2"}, log
        assert set(placed.values()) <= set(netns_cluster.names), placed
        assert set(t["node"].split(",")) == set(placed.values())
        for node in placed.values():
            held[node] = held.get(node, 0) + 1
        rows = [json.loads(x) for x in (Path(t["dir"]) / "result.json").read_text().splitlines()]
        assert rows[-1]["training_iteration"] == 3
        assert rows[-1]["num_healthy_env_runners"] == 2
    # 2 CPUs a node, 3 a trial: the two trials, placed one after the other, share none over
    assert max(held.values()) <= 2, held
    from rlmesh.tune import ExperimentAnalysis

    analysis = ExperimentAnalysis.from_dir(exp)
    assert analysis.best_config["lr"] in (0.001, 0.0005)
    assert "best" in (exp / "summary.txt").read_text().lower()


def test_a_launched_sweeps_trial_that_does_not_fit_waits(tmp_path, netns_cluster, env):
    # 4 CPUs a trial (learner and 3 runners) on 6: the second trial waits for the first.
    path = cluster_file(tmp_path, netns_cluster, runners=3, stop={"training_iteration": 2},
                        lr={"grid_search": [0.001, 0.0005]})
    done = rlmesh("launch", str(path), env=env, timeout=400)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    waits = out.index("scheduler: IMPALA_CartPole-v1_00001 waits")
    assert waits < out.index("IMPALA_CartPole-v1_00000 TERMINATED")
    assert out.index("IMPALA_CartPole-v1_00000 TERMINATED") < out.index(
        "scheduler: IMPALA_CartPole-v1_00001 placed on ")
    state = json.loads(next((tmp_path / "results").glob("*/experiment_state.json")).read_text())
    assert [t["status"] for t in state["trials"]] == ["TERMINATED", "TERMINATED"]


# --- data-parallel learners on several nodes ---

TWO_LEARNERS = {"num_learners": 2, "num_cpus_per_learner": 2}  # 2 CPUs each: a node each
PPO_SETTINGS = {"num_envs_per_env_runner": 4, "train_batch_size": 800, "minibatch_size": 200,
                "num_epochs": 4, "lr": 0.0005, "model": {"fcnet_hiddens": [32, 32]},
                **TWO_LEARNERS}


def launch_and_wait(path: Path, env, *args: str, timeout: float = 240
                    ) -> tuple[subprocess.Popen, dict, str]:
    name = path.read_text().split('"')[1]
    launch = subprocess.Popen([*RLMESH, "launch", str(path), *args], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env=env)
    try:
        state = wait_for_state(path.parent / "clusters" / name / "head.json", "placement", launch)
        out, _ = launch.communicate(timeout=timeout)
    finally:
        if launch.poll() is None:
            launch.kill()
    return launch, state, out


@pytest.mark.parametrize("run", ["PPO", "IMPALA"])
def test_two_learners_on_two_nodes_train_as_one(tmp_path, netns_cluster, env, run):
    settings = PPO_SETTINGS if run == "PPO" else None
    path = cluster_file(tmp_path, netns_cluster, stop={"training_iteration": 4}, run=run,
                        algo_settings=settings, **({} if settings else TWO_LEARNERS))
    launch, state, out = launch_and_wait(path, env)
    placement = state["placement"]
    assert placement["learner-0"] != placement["learner-1"], placement
    assert launch.returncode == 0, out
    rows = results(tmp_path)
    assert rows[-1]["training_iteration"] == 4
    assert rows[-1]["num_env_steps_trained"] > rows[0]["num_env_steps_trained"] > 0
    assert np.isfinite(rows[-1]["info"]["learner"]["default_policy"]["total_loss"])


def test_losing_one_of_two_learner_nodes_is_one_line_and_resume_goes_on(tmp_path, netns_cluster,
                                                                          env):
    path = cluster_file(tmp_path, netns_cluster, stop={"training_iteration": 1000}, run="PPO",
                        algo_settings=PPO_SETTINGS, job="checkpoint_freq = 1")
    code, out = kill_learners_node_after_a_checkpoint(path, netns_cluster, env, "learner-1",
                                                      checkpoint_timeout=90)
    assert code == 1, out
    errors = [line for line in out.splitlines() if "error:" in line]
    assert len(errors) == 1 and "learner-1" in errors[0], out
    assert "Traceback" not in out and "--resume" in out, out
    done = max(r["training_iteration"] for r in results(tmp_path))
    path.write_text(path.read_text().replace('training_iteration" = 1000',
                                             f'training_iteration" = {done + 2}'))
    assert f'training_iteration" = {done + 2}' in path.read_text()
    launch, _, out = launch_and_wait(path, env, "--resume")
    assert launch.returncode == 0, out
    rows = results(tmp_path)
    assert rows[-1]["training_iteration"] == done + 2


def test_a_launched_script_with_a_lambda_is_one_line_and_starts_nothing(tmp_path, netns_cluster,
                                                                        env, runs_root):
    """A policy_mapping_fn lambda cannot reach a node (nodes import code by path): `rlmesh
    launch` says so in one line, before any agent or actor starts (rlmesh/runtime/handed.py)."""
    script = tmp_path / "train_lambda.py"
    script.write_text(
        "from rlmesh.algorithms.ppo import PPOConfig\n"
        "cfg = (PPOConfig().environment('CartPole-v1').env_runners(num_env_runners=2)\n"
        "       .multi_agent(policies={'a'}, policy_mapping_fn=lambda aid, ep, **kw: 'a'))\n"
        "cfg.build().train()\n")
    path = cluster_file(tmp_path, netns_cluster, stop={"training_iteration": 1})
    text = path.read_text()
    path.write_text(text[:text.index("[job]")] + f'[job]\nscript = "{script}"\n')
    done = rlmesh("launch", str(path), env=env, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    assert len(errors) == 1, done.stderr
    assert "policy_mapping_fn" in errors[0] and "module level" in errors[0], errors
    assert "Traceback" not in done.stderr
    assert not mesh_processes(runs_root)  # no agent, no actor: nothing started
