"""The ``torchrun`` provider: the nodes are the processes of a ``torchrun`` launch, one per node,
for users whose clusters already start jobs the torch.distributed way:

    torchrun --nnodes=3 --nproc-per-node=1 --rdzv-backend=c10d \
             --rdzv-endpoint=HEAD_HOST:29400 -m rlmesh launch cluster.toml

torchrun gives every process ``RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``
and ``MASTER_PORT``. Rank 0 becomes the head: it runs the job's driver, opens the join desk
on ``MASTER_ADDR`` (port ``[torchrun] join_port``, default ``MASTER_PORT + 1``) and starts its
own node's agent beside it. Every other rank runs an agent that joins it as ``node<RANK>``.
From there the job is placed and supervised as on any provider, and data-parallel learners
(``num_learners`` > 1) form their torch.distributed group through rank 0 of *their* group,
whichever node the scheduler put it on. One process per node: rlmesh starts the learners
and runners on each node itself, with the node's GPUs.

The CURVE keys: rank 0 writes a fresh pair for this launch (its run id, master address and
port name the folder) into a folder every rank can read (the cluster's state folder under a
shared home, or ``[torchrun] keys_dir``); the other ranks wait for it. Where no file system is
shared, set ``[security] curve = false`` with ``insecure_trusted_network = true``, as for
torch.distributed's own traffic.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any, Mapping

from rlmesh.launcher.providers.base import ProviderError
from rlmesh.launcher.providers.joining import JoiningProvider, agent_argv, resolve

ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
KEYS_WAIT_S = float(os.environ.get("RLMESH_JOIN_TIMEOUT_S", "300"))


def read_env(env: Mapping[str, str]) -> dict[str, Any]:
    """torchrun's variables, checked: one line naming what is missing or wrong."""
    missing = [v for v in ENV if not env.get(v)]
    if missing:
        raise ProviderError(f"provider 'torchrun' runs under torchrun, and {', '.join(missing)} "
                            "is not set: start it with `torchrun --nnodes=N --nproc-per-node=1 "
                            "... -m rlmesh launch cluster.toml`")
    try:
        rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
        port = int(env["MASTER_PORT"])
        local_world = int(env.get("LOCAL_WORLD_SIZE", "1"))
    except ValueError as exc:
        raise ProviderError(f"torchrun's environment is not numbers where it should be: {exc}") from None
    if local_world != 1:
        raise ProviderError(f"LOCAL_WORLD_SIZE is {local_world}: run one rlmesh process per node "
                            "(torchrun --nproc-per-node=1); rlmesh starts each node's learners "
                            "and runners itself, on its GPUs")
    if not 0 <= rank < world:
        raise ProviderError(f"RANK {rank} is not in [0, WORLD_SIZE={world})")
    run_id = env.get("TORCHELASTIC_RUN_ID", "none")
    return {"rank": rank, "world": world, "master": env["MASTER_ADDR"], "port": port,
            "run": re.sub(r"[^A-Za-z0-9_.-]", "_", f"{run_id}-{env['MASTER_ADDR']}-{port}")}


def keys_folder(cluster: Any, run: str) -> Path:
    base = Path(cluster.torchrun.keys_dir).expanduser() if cluster.torchrun.keys_dir \
        else cluster.state_dir / "torchrun-keys"
    return base / run


def join_port(cluster: Any, port: int) -> int:
    return cluster.torchrun.join_port or port + 1


class TorchrunProvider(JoiningProvider):
    name = "torchrun"

    def __init__(self, cluster: Any, env: Mapping[str, str] | None = None) -> None:
        super().__init__(cluster, env)
        self.launch = read_env(self.env)
        if self.launch["rank"] != 0:
            raise ProviderError(f"rank {self.launch['rank']} of a torchrun launch runs an agent, "
                                "not the head")
        self.names = [f"node{r}" for r in range(self.launch["world"])]
        self.join_port = join_port(cluster, self.launch["port"])

    def head_host(self) -> str:
        return resolve(self.launch["master"])

    def curve_dir(self) -> str | None:
        return str(keys_folder(self.cluster, self.launch["run"])) if self.cluster.security.curve \
            else None

    def keys(self) -> Any:
        """A fresh pair for this launch, written where the other ranks wait for it (made in
        a folder beside and renamed into place: a rank never reads half a pair)."""
        if not self.cluster.security.curve:
            return None
        import shutil

        from rlmesh.wire.security import make_cluster_keys

        final = keys_folder(self.cluster, self.launch["run"])
        final.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = final.with_name(final.name + f".tmp{os.getpid()}")
        keys = make_cluster_keys(tmp)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        from rlmesh.wire.security import ClusterKeys

        del keys
        return ClusterKeys.load(final)

    def describe(self) -> str:
        return (f"{self.launch['world']} node(s) of a torchrun launch (rank 0 here), agents "
                "joining from each")


def agent_plan(cluster: Any, env: Mapping[str, str] | None = None) -> list[str] | None:
    """For a rank other than 0: the argv of its agent (it joins rank 0). None on rank 0 (the
    head)."""
    env = os.environ if env is None else env
    launch = read_env(env)
    if launch["rank"] == 0:
        return None
    head = resolve(launch["master"])
    curve = "-"
    if cluster.security.curve:
        folder = keys_folder(cluster, launch["run"])
        from rlmesh.wire.security import PUBLIC, SECRET

        deadline = time.monotonic() + KEYS_WAIT_S
        while not ((folder / PUBLIC).exists() and (folder / SECRET).exists()):
            if time.monotonic() > deadline:
                raise ProviderError(f"rank {launch['rank']}: no cluster keys at {folder} after "
                                    f"{KEYS_WAIT_S:.0f} s; the torchrun provider needs a folder "
                                    "every node shares ([torchrun] keys_dir), or [security] "
                                    "curve = false on a trusted network")
            time.sleep(0.5)
        curve = str(folder)
    return agent_argv(f"node{launch['rank']}", head, join_port(cluster, launch["port"]),
                      f"torchrun-{cluster.cluster_name}", curve)
