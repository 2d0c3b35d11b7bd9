"""``rlmesh launch | up | down | status | exec | stack`` with a cluster file.

``launch`` runs the file's job with its driver here (the head), the actors on the nodes;
``up`` holds the agents only, until Ctrl-C; ``status`` and ``stack`` ask a running head's
agents; ``down`` stops the head and clears every node; ``exec`` runs a command on each node.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable

# Only the standard library's light modules at the top: `rlmesh --help` builds this
# module's parsers, and asyncio alone would add 50 ms to every rlmesh command.

from rlmesh.cli.main import Command, _stack_args  # the standard library only

EXIT_USAGE = 2


def _arguments(command: str) -> Callable[[argparse.ArgumentParser], None]:
    return lambda p: add_arguments(p, command)


def _stack_arguments(p: argparse.ArgumentParser) -> None:
    _stack_args(p)
    p.add_argument("cluster_file", nargs="?", metavar="CLUSTER_TOML",
                   help="every process on every node of this cluster instead (through its agents)")


def _node_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--from-env", action="store_true", required=True,
                   help="read the pod's index, cluster file, head and keys from its environment "
                        "(JOB_COMPLETION_INDEX, RLMESH_CLUSTER_FILE, RLMESH_HEAD_HOST, "
                        "RLMESH_JOIN_PORT, RLMESH_CURVE_DIR), as the rendered manifests set them")


def node_main(args: argparse.Namespace) -> int:
    """``rlmesh node --from-env``: pod 0 launches the file (the head), every other pod runs
    an agent that joins it."""
    from rlmesh.launcher.providers.base import ProviderError
    from rlmesh.launcher.providers.k8s_head import pod_plan

    try:
        what, argv = pod_plan()
    except ProviderError as exc:
        print(f"rlmesh node: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if what == "launch":
        p = argparse.ArgumentParser(prog="rlmesh launch")
        add_arguments(p, "launch")
        launch_args = p.parse_args(argv)
        launch_args.command = "launch"
        return main(launch_args)
    from rlmesh.launcher.agent import main as agent_main

    agent_main(argv)
    return 0


# The rlmesh command's table (rlmesh/__main__.py) takes these over rlmesh/cli's: stack gains
# a cluster file.
CLUSTER_COMMANDS: dict[str, Command] = {
    "stack": Command("rlmesh.launcher.commands:stack_main",
                     "threads, asyncio tasks and blocked loops of every rlmesh process here "
                     "(or on every node of a cluster)", _stack_arguments),
    "launch": Command("rlmesh.launcher.commands:main", "run a cluster file's job: agents on its "
                      "nodes over SSH, the actors placed on them, logs home", _arguments("launch")),
    "up": Command("rlmesh.launcher.commands:main", "start the cluster's node agents and hold them",
                  _arguments("up")),
    "down": Command("rlmesh.launcher.commands:main",
                    "stop the cluster's head and everything on its nodes", _arguments("down")),
    "status": Command("rlmesh.launcher.commands:main",
                      "nodes, resources and processes of a running cluster", _arguments("status")),
    "exec": Command("rlmesh.launcher.commands:main", "run a command on every node of the cluster",
                    _arguments("exec")),
    "node": Command("rlmesh.launcher.commands:node_main", "a pod's part of a Kubernetes job "
                    "(pod 0: the head; the others: an agent that joins it)", _node_arguments),
}


def stack_main(args: argparse.Namespace) -> int:
    """``rlmesh stack``: this machine's processes (rlmesh/cli/stack.py), or with a cluster
    file every node's, through its agents."""
    if args.cluster_file:
        return main(args)
    from rlmesh.cli import stack as local_stack

    return local_stack.main(args)


def add_arguments(p: argparse.ArgumentParser, command: str) -> None:
    p.add_argument("cluster_file", metavar="CLUSTER_TOML", help="the cluster file (see "
                   "launcher/ssh/cluster.example.toml)")
    if command in ("launch", "up"):
        p.add_argument("-v", "--verbose", action="store_true",
                       help="echo every line the nodes' processes print (default: warnings "
                            "and errors)")
    if command == "launch":
        p.add_argument("--resume", action="store_true",
                       help="go on from the job's newest checkpoint (as rlmesh train --resume)")
        p.add_argument("--submit", action="store_true",
                       help="provider slurm: write the sbatch script the file asks for, submit "
                            "it and follow its output (the launch then runs inside the job)")
        p.add_argument("--test-only", action="store_true",
                       help="with --submit: ask sbatch whether it would take the script "
                            "(sbatch --test-only), submit nothing")
        p.add_argument("--no-follow", action="store_true",
                       help="with --submit: print the job id and return")
        p.add_argument("--render", choices=("k8s",), metavar="k8s",
                       help="provider kubernetes: write the manifests (Secret, ConfigMap, "
                            "headless Service, Indexed Job) instead of launching")
        p.add_argument("-o", "--output", metavar="PATH",
                       help="with --render: the file to write (default: stdout)")
    if command == "exec":
        p.add_argument("remote_command", nargs=argparse.REMAINDER, metavar="COMMAND",
                       help="the shell command to run on every node")
    if command == "status":
        p.add_argument("--json", action="store_true", help="one JSON document")
        p.add_argument("--timeout", type=float, default=3.0, metavar="S",
                       help="seconds to wait for each node (default 3)")


def _load(path: str) -> Any:
    from rlmesh.launcher.cluster_config import ClusterConfigError, load_cluster

    try:
        return load_cluster(path)
    except ClusterConfigError as exc:
        print(f"rlmesh: error: {exc}", file=sys.stderr)
        return None


def main(args: argparse.Namespace) -> int:
    cluster = _load(args.cluster_file)
    if cluster is None:
        return EXIT_USAGE
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    command = {"launch": launch, "up": up, "down": down, "status": status,
               "exec": exec_command, "stack": stack}[args.command]
    return command(cluster, args)


def _session(cluster: Any, args: argparse.Namespace) -> Any:
    from rlmesh.launcher.session import ClusterSession, load_state

    running = load_state(cluster)
    if running is not None:
        raise RuntimeError(f"cluster {cluster.cluster_name!r} already has a head running (pid "
                           f"{running['pid']}); `rlmesh down {args.cluster_file}` first")
    session = ClusterSession(cluster, verbose=getattr(args, "verbose", False))
    print(f"rlmesh: preparing {cluster.cluster_name!r}: {session.provider.describe()}",
          file=sys.stderr)
    session.prepare()
    return session


def _session_or_error(cluster: Any, args: argparse.Namespace) -> Any:
    """A prepared session, or None after saying why not (a head already up, SSH failed,
    no Slurm allocation)."""
    from rlmesh.launcher.ssh import SSHError

    try:
        return _session(cluster, args)
    except (RuntimeError, SSHError) as exc:  # ProviderError is a RuntimeError
        print(f"rlmesh {args.command}: error: {exc}", file=sys.stderr)
        return None


def launch(cluster: Any, args: argparse.Namespace) -> int:
    """The job of the file, its driver here and its actors on the nodes."""
    from rlmesh.config.settings import ConfigError
    from rlmesh.placement.scheduler import PlacementError

    if args.submit or args.render:
        return _submit_or_render(cluster, args)
    if cluster.provider == "torchrun":
        joined = _torchrun_rank(cluster)
        if joined is not None:
            return joined
    session = _session_or_error(cluster, args)
    if session is None:
        return EXIT_USAGE
    session.install()
    try:
        job = cluster.job
        if job.kind == "script":
            import runpy

            sys.argv = [str(job.script), *job.args]
            runpy.run_path(str(job.script), run_name="__main__")
            return 0
        if job.is_sweep:
            return _launch_sweep(cluster, session, args)
        from rlmesh.cli.train import run_spec

        return run_spec(job.train_spec(), resume=args.resume)
    except PlacementError as exc:  # raised before any of the job's processes started
        where = "the cluster"
        if getattr(session.provider, "allocation", None) is not None:
            where = f"Slurm job {session.provider.allocation.job_id}'s allocation"
        print(f"rlmesh launch: error: the job does not fit {where}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ConfigError as exc:  # build() refused the config (a lambda): nothing started
        print(f"rlmesh launch: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        session.close()


def _torchrun_rank(cluster: Any) -> int | None:
    """Under torchrun, every rank runs `rlmesh launch`: a rank other than 0 runs its node's
    agent, which joins rank 0 (the head); None on rank 0."""
    from rlmesh.launcher.providers.base import ProviderError
    from rlmesh.launcher.providers.torchrun import agent_plan

    try:
        argv = agent_plan(cluster)
    except ProviderError as exc:
        print(f"rlmesh launch: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if argv is None:
        return None
    from rlmesh.launcher.agent import main as agent_main

    agent_main(argv)
    return 0


def _submit_or_render(cluster: Any, args: argparse.Namespace) -> int:
    """``--submit`` (slurm) or ``--render k8s`` (kubernetes): nothing launched here."""
    from rlmesh.launcher.providers.base import ProviderError

    want = "slurm" if args.submit else "kubernetes"
    flag = "--submit" if args.submit else "--render k8s"
    if cluster.provider != want:
        print(f"rlmesh launch: error: {flag} is for provider {want!r}; {args.cluster_file} has "
              f"provider {cluster.provider!r}", file=sys.stderr)
        return EXIT_USAGE
    try:
        if args.render:
            from rlmesh.launcher.providers.kubernetes import render_file

            text = render_file(cluster, Path(args.cluster_file))
            if args.output:
                # It holds the cluster's secret key: readable by its owner only.
                fd = os.open(args.output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                os.fchmod(fd, 0o600)
                with os.fdopen(fd, "w") as fh:
                    fh.write(text)
                print(f"rlmesh launch: manifests written to {args.output} (kubectl apply -f "
                      f"{args.output})", file=sys.stderr)
            else:
                sys.stdout.write(text)
            return 0
        from rlmesh.launcher.providers import slurm_submit as slurm

        script = slurm.render_sbatch(cluster, args.cluster_file, python=sys.executable,
                                     resume=args.resume)
        folder = cluster.state_dir / "submit"
        if args.test_only:
            print(slurm.submit(script, folder, test_only=True))
            return 0
        job_id = slurm.submit(script, folder)
        out = (cluster.slurm.output or f"slurm-{cluster.slurm.job_name or cluster.cluster_name}"
               f"-%j.out").replace("%j", job_id)
        print(f"rlmesh launch: submitted Slurm job {job_id} ({folder / 'submit.sbatch'}); "
              f"output: {folder / out}", file=sys.stderr)
        if args.no_follow:
            print(job_id)
            return 0
        try:
            return slurm.follow(job_id, folder / out)
        except KeyboardInterrupt:
            print(f"\nrlmesh launch: stopped following; Slurm job {job_id} goes on (scancel "
                  f"{job_id} stops it; its output: {folder / out})", file=sys.stderr)
            return 130
    except (ProviderError, ValueError) as exc:
        print(f"rlmesh launch: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _launch_sweep(cluster: Any, session: Any, args: argparse.Namespace) -> int:
    """The job's sweep, run here on the head: each trial's driver a worker process here, its
    actors placed on the nodes by the scheduler against what the running trials hold (a
    trial that does not fit waits), started there by a cluster session of its own."""
    import copy

    from rlmesh import tune

    job = cluster.job
    nodes = _sweep_nodes(cluster, session)
    analysis = tune.run(job.run, config=copy.deepcopy(dict(job.config)), stop=dict(job.stop),
                        num_samples=job.num_samples, name=job.experiment_name,
                        local_dir=job.local_dir, checkpoint_freq=job.checkpoint_freq,
                        resume=args.resume, nodes=nodes,
                        cluster_file=str(Path(args.cluster_file).resolve()),
                        join_cluster="rlmesh.launcher.session:join_trial")
    if analysis.interrupted:
        return 130
    return 1 if any(t.status == "ERROR" for t in analysis.trials) else 0


def _sweep_nodes(cluster: Any, session: Any) -> list[Any]:
    """The scheduler's nodes: as the file declares them, or (a CPU or GPU count not given)
    as their agents detect them, asked once before the sweep."""
    import asyncio

    from rlmesh.launcher.cluster_config import ClusterConfigError

    try:
        return cluster.scheduler_nodes({})
    except ClusterConfigError:
        pass

    async def detect() -> dict[str, Any]:
        await session.start()
        detected = dict(session.detected)
        await session.shutdown()
        return detected
    return cluster.scheduler_nodes(asyncio.run(detect()))


def up(cluster: Any, args: argparse.Namespace) -> int:
    """Start the agents and hold them (Ctrl-C or `rlmesh down` ends it)."""
    session = _session_or_error(cluster, args)
    if session is None:
        return EXIT_USAGE

    import asyncio

    async def hold() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await session.start()
        print(f"rlmesh up: agents on {', '.join(session.links)}; Ctrl-C stops them",
              file=sys.stderr)
        await stop.wait()
        await session.shutdown()

    try:
        asyncio.run(hold())
    finally:
        session.close()
    return 0


def _agents(cluster: Any) -> tuple[dict[str, Any], dict[str, Any]] | None:
    from rlmesh.launcher.session import load_state
    from rlmesh.wire.security import ClusterKeys, use_keys

    state = load_state(cluster)
    if state is None:
        print(f"rlmesh: no head of {cluster.cluster_name!r} is running here "
              f"(`rlmesh launch` or `rlmesh up` starts one)", file=sys.stderr)
        return None
    keys = cluster.state_dir / "keys"
    if cluster.security.curve and keys.exists():
        use_keys(ClusterKeys.load(keys))
    return state, state["agents"]


async def _ask_agents(agents: dict[str, str], method: str, timeout: float) -> dict[str, Any]:
    import asyncio

    from rlmesh.runtime import ActorHandle

    async def one(address: str) -> Any:
        handle = ActorHandle(address, timeout=timeout)
        try:
            return await handle.call(method, timeout=timeout)
        except Exception as exc:  # a node that does not answer is reported, not fatal
            return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0]}"}
        finally:
            handle.close()
    got = await asyncio.gather(*(one(a) for a in agents.values()))
    return dict(zip(agents, got))


def status(cluster: Any, args: argparse.Namespace) -> int:
    """Nodes, their resources (total, placed), and every process with its role and state."""
    found = _agents(cluster)
    if found is None:
        return 1
    import asyncio

    state, agents = found
    replies = asyncio.run(_ask_agents(agents, "processes", args.timeout))
    if args.json:
        print(json.dumps({"head": state, "nodes": replies}, indent=1, default=str))
        return 0
    placed: dict[str, list[str]] = {}
    for actor, node in state.get("placement", {}).items():
        placed.setdefault(node, []).append(actor)
    print(f"cluster {cluster.cluster_name}: head {state['head']} (pid {state['pid']}), "
          f"job {state['job_id']}")
    for node, reply in replies.items():
        print(f"\n{node}: {_resources_line(state, node)}; placed: "
              f"{', '.join(sorted(placed.get(node, []))) or 'nothing'}")
        if isinstance(reply, dict) and "error" in reply:
            print(f"  unreachable: {reply['error']}")
            continue
        ages = state.get("heartbeat_age_s", {})
        for record in reply:
            beat, age = record.get("heartbeat_ms"), ages.get(record["name"])
            rate = record.get("messages_per_s")
            print(f"  {record['name']:<16} {record['role']:<12} pid {record['pid']:<8} "
                  f"{record.get('state', '?'):<12} heartbeat "
                  f"{'-' if age is None else f'{age:.1f} s ago':<10} ping "
                  f"{'-' if beat is None else f'{beat:.1f} ms':<9} loop lag "
                  f"{record.get('loop_lag_ms', '-')} ms  {rate if rate is not None else '-'} msg/s")
    return 0


def _resources_line(state: dict[str, Any], node: str) -> str:
    """"CPU 3 of 4 used, GPU 0 of 1 used": what the placement holds of the node's total."""
    total = state.get("resources", {}).get(node, {})
    used = state.get("used", {}).get(node, {})
    free = state.get("free", {}).get(node, {})
    parts = []
    for key in sorted(set(total) | set(used)):
        if key == "memory" or key.startswith("node:"):
            continue
        have = used.get(key, 0) + free.get(key, 0) if key in free else total.get(key, 0)
        parts.append(f"{key} {used.get(key, 0):g} of {have:g} used")
    return ", ".join(parts) or "resources unknown"


def stack(cluster: Any, args: argparse.Namespace) -> int:
    """Stacks of every process on every node, grouped by role and identical stack."""
    from rlmesh.cli.stack import format_text

    found = _agents(cluster)
    if found is None:
        return 1
    import asyncio

    _, agents = found
    replies = asyncio.run(_ask_agents(agents, "stacks", args.timeout + 5))
    entries, errors = [], []
    for node, reply in replies.items():
        if isinstance(reply, dict):
            errors.append(f"{node}: {reply['error']}")
            continue
        for entry in reply:
            entry["role"] = f"{entry['role']} @{node}" if not args.json else entry["role"]
            entries.append(entry)
    if args.json:
        print(json.dumps({"processes": entries, "errors": errors}, indent=1, default=str))
    else:
        sys.stdout.write(format_text(entries))
        for err in errors:
            print(f"rlmesh stack: {err}", file=sys.stderr)
    return 0 if entries else 1


def exec_command(cluster: Any, args: argparse.Namespace) -> int:
    """``COMMAND`` on every node at once, its output prefixed by the node."""
    from concurrent.futures import ThreadPoolExecutor

    from rlmesh.launcher.ssh import SSH, SSHError

    if cluster.provider != "ssh":
        hint = ("srun --overlap --jobid=<job> --nodes=<n> COMMAND inside the allocation"
                if cluster.provider == "slurm" else "kubectl exec <pod> -- COMMAND")
        print(f"rlmesh exec: error: exec runs over SSH (provider 'ssh'); provider "
              f"{cluster.provider!r} has no SSH to its nodes: use {hint}", file=sys.stderr)
        return EXIT_USAGE
    command = " ".join(args.remote_command).strip()
    if not command:
        print("rlmesh exec: error: no command given", file=sys.stderr)
        return EXIT_USAGE

    def one(node: str) -> int:
        ssh = SSH(cluster.ssh_target(node), cluster.state_dir / "ssh")
        try:
            done = ssh.run(command, timeout=600, check=False)
        except SSHError as exc:
            print(f"[{node}] error: {exc}")
            return 255
        for stream in (done.stdout, done.stderr):
            for line in stream.decode("utf-8", "replace").splitlines():
                print(f"[{node}] {line}")
        return done.returncode

    with ThreadPoolExecutor(max_workers=min(16, len(cluster.nodes) or 1)) as pool:
        codes = list(pool.map(one, [n.name for n in cluster.nodes]))
    return max(codes, default=0) and 1


def down(cluster: Any, args: argparse.Namespace) -> int:
    """Stop the head (it stops its agents), then make sure nothing of the cluster is left
    on any node."""
    from rlmesh.launcher.session import load_state
    from rlmesh.launcher.ssh import SSH, SSHError

    state = load_state(cluster)
    if state is not None:
        if state.get("slurm_job") and not state.get("local", True):
            # A head on another node of a Slurm job: its job ends it, agents and all.
            import subprocess

            subprocess.run(["scancel", str(state["slurm_job"])], check=False)
        else:
            os.kill(state["pid"], signal.SIGTERM)
        deadline = time.monotonic() + 15
        while load_state(cluster) is not None and time.monotonic() < deadline:
            time.sleep(0.2)
    if cluster.provider != "ssh":
        # The agents' lifeline is the provider's (the srun step, the head's heartbeats).
        (cluster.state_dir / "head.json").unlink(missing_ok=True)
        print(f"rlmesh down: {cluster.cluster_name} stopped")
        return 0
    # Whatever survived (a head killed with SIGKILL whose agents have not yet noticed):
    # the agents of this cluster, and with them their children's lifelines.
    pattern = "rlmesh.launcher.agent [^ ]+ [^ ]+ [^ ]+ [^ ]+-"
    failed = 0
    for node in cluster.nodes:
        ssh = SSH(cluster.ssh_target(node.name), cluster.state_dir / "ssh")
        try:
            ssh.run(f"pkill -KILL -f {json.dumps(pattern)} || true", timeout=30, check=False)
        except SSHError as exc:
            print(f"rlmesh down: {node.name}: {exc}", file=sys.stderr)
            failed += 1
        finally:
            ssh.close()
    (cluster.state_dir / "head.json").unlink(missing_ok=True)
    print(f"rlmesh down: {cluster.cluster_name} stopped"
          + (f" ({failed} nodes unreachable)" if failed else ""))
    return 1 if failed else 0
