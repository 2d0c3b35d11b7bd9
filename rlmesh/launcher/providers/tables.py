"""The cluster file's provider tables, checked key by key: ``[slurm]`` (what ``rlmesh launch
--submit`` asks Slurm for, how the agents' step starts) and ``[torchrun]``. Kept apart from
the providers (providers/slurm.py, providers/torchrun.py) so the cluster file's reader needs
none of them. (``[kubernetes]`` is read by providers/kubernetes.py, which renders from it.)"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from rlmesh.launcher.cluster_values import _Invalid, _python, _show, _string, _strings, _table

SLURM_KEYS = ("nodes", "partition", "time", "gres", "gpus_per_node", "cpus_per_node", "account",
              "qos", "job_name", "python", "sbatch_options", "setup", "output", "join_port")
_TIME = re.compile(r"(\d+-)?\d+(:\d{1,2}){0,2}\Z|(\d+-\d+)\Z|INFINITE\Z|UNLIMITED\Z")

@dataclass(frozen=True)
class SlurmConfig:
    """``[slurm]``: what ``--submit`` asks Slurm for, and how the agents start."""

    nodes: int | None = None  # --nodes; inside an allocation, checked against it
    partition: str | None = None
    time: str = "01:00:00"
    gres: str | None = None  # per node, e.g. "gpu:2"
    gpus_per_node: int | None = None
    cpus_per_node: int | None = None  # --cpus-per-task of the one task per node
    account: str | None = None
    qos: str | None = None
    job_name: str | None = None  # default: the cluster's name
    python: str = "python3"  # on the nodes, with rlmesh installed
    sbatch_options: tuple[str, ...] = ()  # more "#SBATCH" lines, e.g. "--constraint=a100"
    setup: tuple[str, ...] = ()  # shell lines the script runs before the launch
    output: str | None = None  # the script's output file (default: slurm-<name>-%j.out)
    join_port: int = 0  # the head's join desk (0: any free port)


def parse_slurm(value: Any, key: str = "slurm") -> SlurmConfig:
    data = _table(value, key, SLURM_KEYS)
    out: dict[str, Any] = {}
    for name in ("nodes", "gpus_per_node", "cpus_per_node", "join_port"):
        if name in data:
            v = data[name]
            low = 0 if name in ("gpus_per_node", "join_port") else 1
            if isinstance(v, bool) or not isinstance(v, int) or v < low or v > 65535:
                raise _Invalid(f"{key}.{name}", f"expected a whole number >= {low}, got {_show(v)}")
            out[name] = v
    for name in ("partition", "gres", "account", "qos", "job_name", "output"):
        if name in data:
            text = _string(data[name], f"{key}.{name}")
            if not text or any(c in text for c in "\n\0"):
                raise _Invalid(f"{key}.{name}", f"expected one line of text, got {_show(text)}")
            out[name] = text
    if "time" in data:
        t = _string(data["time"], f"{key}.time")
        if not _TIME.match(t):
            raise _Invalid(f"{key}.time", f"expected a Slurm time limit (minutes, MM:SS, "
                           f"HH:MM:SS, D-HH:MM:SS), got {_show(t)}")
        out["time"] = t
    if "gres" in out and not re.match(r"[A-Za-z0-9_]+(:[A-Za-z0-9_.-]+)*(,[A-Za-z0-9_]+(:[A-Za-z0-9_.-]+)*)*\Z", out["gres"]):
        raise _Invalid(f"{key}.gres", f"expected a Slurm --gres value such as \"gpu:2\", got "
                       f"{_show(out['gres'])}")
    if "python" in data:
        out["python"] = _python(data["python"], f"{key}.python")
    for name in ("sbatch_options", "setup"):
        if name in data:
            out[name] = _strings(data[name], f"{key}.{name}")
    for i, option in enumerate(out.get("sbatch_options", ())):
        if not option.startswith("-") or "\n" in option:
            raise _Invalid(f"{key}.sbatch_options[{i}]", f"expected an sbatch option such as "
                           f"\"--constraint=a100\", got {_show(option)}")
    return SlurmConfig(**out)


TORCHRUN_KEYS = ("join_port", "keys_dir")


@dataclass(frozen=True)
class TorchrunConfig:
    """``[torchrun]``: where the head (rank 0) takes its agents' joins, and where every rank
    finds the cluster's CURVE keys (a folder on a file system they share)."""

    join_port: int = 0  # 0: MASTER_PORT + 1
    keys_dir: str = ""  # "": <the cluster's state folder>/torchrun-keys/ (a shared home)


def parse_torchrun(value: Any, key: str = "torchrun") -> TorchrunConfig:
    data = _table(value, key, TORCHRUN_KEYS)
    out: dict[str, Any] = {}
    if "join_port" in data:
        v = data["join_port"]
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 65535:
            raise _Invalid(f"{key}.join_port", f"expected a port (0-65535), got {_show(v)}")
        out["join_port"] = v
    if "keys_dir" in data:
        out["keys_dir"] = _string(data["keys_dir"], f"{key}.keys_dir")
    return TorchrunConfig(**out)
