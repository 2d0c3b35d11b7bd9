"""The ``slurm`` provider: the nodes of the Slurm allocation ``rlmesh launch`` runs inside
(``salloc``, or the ``sbatch`` script that ``rlmesh launch --submit`` writes), one agent on
each started by a single ``srun`` step.

What Slurm gives and this reads:
- the nodes: ``SLURM_JOB_NODELIST`` expanded as ``scontrol show hostnames`` does
  (``expand_hostlist``), their addresses from ``scontrol show node`` (NodeAddr);
- where the head is: on its node of the allocation in a batch script (``SLURMD_NODENAME``),
  or, in salloc's shell on a login node, this machine's address on the route to the nodes;
- their CPUs: ``SLURM_JOB_CPUS_PER_NODE`` (``"4(x2),2"``: one count per node, in order);
- their GPUs: ``SLURM_GPUS_ON_NODE``, else the count of the job's ``--gres=gpu:N``/
  ``--gpus-per-node``; where Slurm says nothing, the agent detects the node's own devices.
The scheduler then places the job's roles inside the allocation as it does on SSH nodes,
and refuses a job that does not fit before any agent starts.

The agents' step: ``srun --overlap --whole --nodes=N --ntasks-per-node=1 --input=all
--label python -m rlmesh.launcher.agent - auto ... --join tcp://HEAD:PORT``. Every task
joins the head (launcher/join.py). The step is their lifeline: srun's stdin, forwarded to
every task, closes when the head goes; srun's end, the job's end and ``scancel`` end every
task on every node. srun's labelled output goes to each node's agent log on the head, and
its ``task N: Exited``/``Killed`` lines mark that node's agent as gone at once (the
heartbeats would say so a little later). The CURVE keys reach the tasks in the step's
environment (no shared file system is assumed); each agent writes them to a folder only its
user reads.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shlex
import shutil
import subprocess
import threading
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Mapping

from rlmesh.launcher.providers.base import MakeAgent, Provider, ProviderError
from rlmesh.launcher.providers.tables import SlurmConfig, parse_slurm

__all__ = ["Allocation", "SlurmConfig", "SlurmProvider", "expand_hostlist", "need_tool",
           "parse_slurm"]

log = logging.getLogger(__name__)

_TASK_END = re.compile(r"srun: error: (\S+): tasks? ([0-9,\-]+): (.*)")
_LABEL = re.compile(r"\s*(\d+): ?(.*)", re.S)


# --- what Slurm says -----------------------------------------------------------------------------

def expand_hostlist(text: str) -> list[str]:
    """Slurm's compressed host list as names, in order (``scontrol show hostnames``):
    ``"node[1-3,7],gpu[08-10]"`` -> node1 node2 node3 node7 gpu08 gpu09 gpu10. Several
    bracket groups in one name multiply (``rack[1-2]-n[1-2]``); zero padding is kept."""
    names: list[str] = []
    for part in _split_top(text.strip()):
        if part:
            names += _expand_one(part)
    return names


def _split_top(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in host list {text!r}")
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"unbalanced '[' in host list {text!r}")
    parts.append(text[start:])
    return parts


def _expand_one(name: str) -> list[str]:
    open_at = name.find("[")
    if open_at < 0:
        return [name]
    close_at = name.index("]", open_at)
    head, body, rest = name[:open_at], name[open_at + 1:close_at], name[close_at + 1:]
    tails = _expand_one(rest)
    out = []
    for piece in body.split(","):
        if "-" in piece:
            lo, hi = piece.split("-", 1)
            if not (lo.isdigit() and hi.isdigit()) or int(hi) < int(lo):
                raise ValueError(f"bad range {piece!r} in host list {name!r}")
            width = len(lo)
            values = [str(v).zfill(width) for v in range(int(lo), int(hi) + 1)]
        elif piece.isdigit():
            values = [piece]
        else:
            raise ValueError(f"bad entry {piece!r} in host list {name!r}")
        out += [f"{head}{v}{tail}" for v in values for tail in tails]
    return out


def cpus_per_node(text: str, count: int) -> list[int]:
    """``SLURM_JOB_CPUS_PER_NODE`` (``"4(x2),2"``) as one count per node."""
    out: list[int] = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not m:
            raise ValueError(f"cannot read SLURM_JOB_CPUS_PER_NODE={text!r}")
        out += [int(m[1])] * int(m[2] or 1)
    if len(out) != count:
        raise ValueError(f"SLURM_JOB_CPUS_PER_NODE={text!r} gives {len(out)} counts for "
                         f"{count} nodes")
    return out


def gpus_from_env(env: Mapping[str, str]) -> int | None:
    """The GPUs per node Slurm gave the job, or None where it does not say."""
    if env.get("SLURM_GPUS_ON_NODE", "").isdigit():
        return int(env["SLURM_GPUS_ON_NODE"])
    for var in ("SLURM_GPUS_PER_NODE", "SLURM_JOB_GPUS_PER_NODE"):
        m = re.search(r"(\d+)\s*$", env.get(var, ""))
        if m:
            return int(m[1])
    m = re.search(r"gpu(?::[^:,]+)?:(\d+)", env.get("SLURM_JOB_GRES", ""))
    if m:
        return int(m[1])
    return None


@dataclass(frozen=True)
class Allocation:
    """The Slurm job ``rlmesh launch`` runs in."""

    job_id: str
    nodes: tuple[str, ...]
    cpus: tuple[int, ...]
    gpus_per_node: int | None
    # The allocated node this process runs on (a batch script's, an srun step's); None in
    # salloc's shell, which runs where salloc was typed (a login node), outside the nodes.
    batch_host: str | None
    addresses: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Allocation":
        env = os.environ if env is None else env
        if not env.get("SLURM_JOB_ID"):
            raise ProviderError(
                "provider 'slurm' needs a Slurm allocation, and SLURM_JOB_ID is not set: run "
                "`rlmesh launch` inside salloc or an sbatch script, or `rlmesh launch --submit`")
        nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST", "")
        try:
            nodes = expand_hostlist(nodelist)
            cpus = cpus_per_node(env.get("SLURM_JOB_CPUS_PER_NODE", ""), len(nodes)) \
                if env.get("SLURM_JOB_CPUS_PER_NODE") else [0] * len(nodes)
        except ValueError as exc:
            raise ProviderError(f"cannot read the Slurm allocation: {exc}") from None
        if not nodes:
            raise ProviderError("SLURM_JOB_NODELIST is empty: no nodes in this allocation")
        return cls(env["SLURM_JOB_ID"], tuple(nodes), tuple(cpus), gpus_from_env(env),
                   env.get("SLURMD_NODENAME") or None)


def need_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise ProviderError(f"'{name}' not found on PATH: the slurm provider runs Slurm's own "
                            f"commands (install Slurm's client tools, or load its module)")
    return path


def node_addresses(names: list[str]) -> dict[str, str]:
    """NodeAddr of each node, as ``scontrol show node`` has it (one call for all)."""
    scontrol = need_tool("scontrol")
    done = subprocess.run([scontrol, "-o", "show", "node", ",".join(names)], capture_output=True,
                          text=True, timeout=60)
    if done.returncode != 0:
        raise ProviderError(f"scontrol show node failed: {done.stderr.strip() or done.stdout.strip()}")
    found: dict[str, str] = {}
    for line in done.stdout.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "NodeName" in fields:
            found[fields["NodeName"]] = fields.get("NodeAddr") or fields["NodeName"]
    missing = [n for n in names if n not in found]
    if missing:
        raise ProviderError(f"scontrol does not know node(s) {', '.join(missing)}")
    return found


# --- the provider --------------------------------------------------------------------------------

class SlurmProvider(Provider):
    name = "slurm"
    start_timeout = 180.0  # an srun step on a busy controller can take its time

    def __init__(self, cluster: Any, env: Mapping[str, str] | None = None) -> None:
        super().__init__(cluster)
        self.config: SlurmConfig = cluster.slurm or SlurmConfig()
        self.allocation = Allocation.from_env(env)
        self.step: AgentStep | None = None
        self.desk: Any = None
        self._server: Any = None

    def resolve(self) -> Any:
        """The cluster file with the allocation's nodes (CPUs and GPUs as Slurm gave them)
        and the head on the batch host's address."""
        from rlmesh.launcher.cluster_config import HeadConfig, NodeConfig

        a = self.allocation
        if self.config.nodes is not None and self.config.nodes != len(a.nodes):
            raise ProviderError(f"slurm.nodes is {self.config.nodes} but the allocation "
                                f"(job {a.job_id}) has {len(a.nodes)} node(s): "
                                f"{', '.join(a.nodes)}")
        addresses = node_addresses(list(a.nodes))
        nodes = []
        for name, cpus in zip(a.nodes, a.cpus):
            resources: dict[str, float] = {}
            if cpus:
                resources["CPU"] = float(cpus)
            if a.gpus_per_node is not None:
                resources["GPU"] = float(a.gpus_per_node)
            nodes.append(NodeConfig(name=name, host=addresses[name],
                                    resources=MappingProxyType(resources)))
        head_host = self.cluster.head.host
        if not head_host and a.batch_host in addresses:
            head_host = addresses[a.batch_host]  # a batch script: the head on its node
        elif not head_host:
            # salloc's shell on a login node: this machine's address on the route to the
            # nodes (the login node is no node of the allocation).
            from rlmesh.launcher.join import outward_address

            head_host = outward_address(addresses[a.nodes[0]])
        head = HeadConfig(host=head_host, resources=None, labels=())
        self.allocation = replace(a, addresses=MappingProxyType(addresses))
        self.cluster = replace(self.cluster, nodes=tuple(nodes), head=head)
        return self.cluster

    def describe(self) -> str:
        a = self.allocation
        return (f"{len(a.nodes)} node(s) of Slurm job {a.job_id} ({', '.join(a.nodes)}), "
                f"agents by one srun step")

    def prepare(self, keys_dir: Any) -> None:
        need_tool("srun")
        self._keys_dir = keys_dir

    def attach(self, keys_dir: Any) -> None:
        self._keys_dir = keys_dir

    async def begin(self, job: Any) -> None:
        from rlmesh.launcher.join import JoinDesk
        from rlmesh.runtime.actor import ActorServer
        from rlmesh.runtime.run_dir import runs_root

        self.desk = JoinDesk(self.allocation.nodes)
        self._server = ActorServer(self.desk, "join-desk", limits=job.limits)
        host = self.cluster.head.host
        address = await self._server.start(f"tcp://{host}:{self.config.join_port}")
        env = dict(os.environ)
        env.update({"PYTHONUNBUFFERED": "1", **dict(self.cluster.env)})
        curve = "-"
        if getattr(self, "_keys_dir", None) is not None:
            from rlmesh.wire.security import PUBLIC, SECRET

            env["RLMESH_CLUSTER_KEY"] = (self._keys_dir / PUBLIC).read_text()
            env["RLMESH_CLUSTER_KEY_SECRET"] = (self._keys_dir / SECRET).read_text()
            curve = "env"
        n = len(self.allocation.nodes)
        argv = [need_tool("srun"), "--overlap", "--whole", f"--jobid={self.allocation.job_id}",
                f"--nodes={n}", f"--ntasks={n}", "--ntasks-per-node=1", "--input=all", "--label",
                "--kill-on-bad-exit=0", f"--job-name={job.job_id}-agents",
                self.config.python, "-m", "rlmesh.launcher.agent", "-", "auto", str(runs_root()),
                job.job_id, curve, "--join", address]
        self.step = AgentStep(argv, env, list(self.allocation.nodes), job.run_dir)
        self.step.start()
        log.info("agents' step: %s", shlex.join(argv))

    def make_agent(self, job: Any, node: str) -> MakeAgent:
        from rlmesh.launcher.join import JoinedAgent

        step, desk = self.step, self.desk
        assert step is not None and desk is not None

        def make(spec: Any, run_dir: Any) -> JoinedAgent:
            return JoinedAgent(spec, run_dir, node, desk, lambda: step.exit_of(node),
                               lambda: step.why_gone(node))
        return make

    async def end(self) -> None:
        if self.step is not None:
            await self.step.stop()
            self.step = None
        if self._server is not None:
            self._server.close()
            self._server = None


class AgentStep:
    """The ``srun`` step running every node's agent: its labelled output sent to each
    node's agent log, the ends of its tasks as srun reports them, its stop."""

    def __init__(self, argv: list[str], env: dict[str, str], nodes: list[str], run_dir: Any) -> None:
        self.argv, self.env, self.nodes, self.run_dir = argv, env, nodes, run_dir
        self.popen: subprocess.Popen[bytes] | None = None
        self.ended: dict[str, int] = {}  # node -> exit code, as srun reported it
        self.errors: list[str] = []  # srun's own lines (not a task's)

    def start(self) -> None:
        self.popen = subprocess.Popen(self.argv, env=self.env, stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      start_new_session=True)
        threading.Thread(target=self._read, args=(self.popen.stdout, True),
                         name="rlmesh.srun-out", daemon=True).start()
        threading.Thread(target=self._read, args=(self.popen.stderr, False),
                         name="rlmesh.srun-err", daemon=True).start()

    def _read(self, stream: Any, out: bool) -> None:
        logs: dict[str, Any] = {}
        try:
            for raw in stream:
                line = raw.decode("utf-8", "replace")
                ended = _TASK_END.match(line.strip())
                if ended:
                    self._task_end(ended)
                m = _LABEL.match(line)
                if m and int(m[1]) < len(self.nodes):
                    node = self.nodes[int(m[1])]
                    if node not in logs:
                        logs[node] = open(self.run_dir.log_path(f"agent-{node}"), "a",
                                          encoding="utf-8")
                    logs[node].write(m[2] if m[2].endswith("\n") else m[2] + "\n")
                    logs[node].flush()
                elif not out or not line.strip():
                    if line.strip() and not ended:
                        self.errors.append(line.rstrip())
                        del self.errors[:-20]
                        log.warning("%s", line.rstrip())
        finally:
            for fh in logs.values():
                fh.close()

    def _task_end(self, m: re.Match[str]) -> None:
        what = m[3]
        code = re.search(r"exit code (\d+)", what)
        value = int(code[1]) if code else (-9 if "Kill" in what else -1)
        tasks: list[int] = []
        for piece in m[2].split(","):
            lo, _, hi = piece.partition("-")
            tasks += range(int(lo), int(hi or lo) + 1)
        for task in tasks:
            if task < len(self.nodes):
                self.ended.setdefault(self.nodes[task], value)

    def exit_of(self, node: str) -> int | None:
        if node in self.ended:
            return self.ended[node]
        if self.popen is not None and self.popen.poll() is not None:
            return self.popen.returncode or -1
        return None

    def why_gone(self, node: str) -> str | None:
        code = self.exit_of(node)
        if code is None:
            return None
        said = "; ".join(self.errors[-3:])
        return f"srun reports exit {code}" + (f" ({said})" if said else "")

    async def stop(self, grace: float = 10.0) -> None:
        """Close the step's stdin (every agent's lifeline), then end srun if it lingers
        (SIGTERM: srun cancels the step on every node), then SIGKILL (its shepherd then
        cancels the step)."""
        p = self.popen
        if p is None:
            return
        if p.stdin is not None and not p.stdin.closed:
            try:
                p.stdin.close()
            except OSError:
                pass
        # srun's own pid, never its process group: srun's "shepherd" child cancels the step
        # when srun dies, and a group-wide SIGKILL would take the shepherd too, leaving every
        # task running (measured on slurm 22.05: tests/cluster/slurm_cluster.py).
        for sig, wait in ((None, grace), (15, 10.0), (9, 5.0)):
            if sig is not None and p.poll() is None:
                try:
                    p.send_signal(sig)
                except ProcessLookupError:
                    pass
            for _ in range(int(wait / 0.1)):
                if p.poll() is not None:
                    return
                await asyncio.sleep(0.1)
