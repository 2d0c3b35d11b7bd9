"""``rlmesh launch --submit``: the sbatch script the cluster file's ``[slurm]`` asks for
(the allocation, then ``rlmesh launch`` of the same file inside it, where the slurm provider,
providers/slurm.py, takes over), its submission, and following its output until the job
leaves the queue."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from rlmesh.launcher.providers.base import ProviderError
from rlmesh.launcher.providers.slurm import need_tool
from rlmesh.launcher.providers.tables import SlurmConfig


def render_sbatch(cluster: Any, cluster_file: str, *, python: str | None = None,
                  resume: bool = False) -> str:
    """The batch script ``rlmesh launch --submit`` hands to sbatch: the allocation the file
    asks for, then ``rlmesh launch`` of the same file inside it."""
    c: SlurmConfig = cluster.slurm or SlurmConfig()
    if c.nodes is None:
        raise ProviderError("`rlmesh launch --submit` needs slurm.nodes (how many nodes to ask "
                            "Slurm for) in the cluster file")
    name = c.job_name or cluster.cluster_name
    lines = ["#!/bin/bash", f"# rlmesh launch --submit {cluster_file}: written by rlmesh",
             f"#SBATCH --job-name={name}", f"#SBATCH --nodes={c.nodes}",
             "#SBATCH --ntasks-per-node=1", f"#SBATCH --time={c.time}",
             f"#SBATCH --output={c.output or f'slurm-{name}-%j.out'}"]
    optional = [("cpus-per-task", c.cpus_per_node), ("partition", c.partition),
                ("gres", c.gres), ("gpus-per-node", c.gpus_per_node),
                ("account", c.account), ("qos", c.qos)]
    lines += [f"#SBATCH --{flag}={value}" for flag, value in optional if value]
    lines += [f"#SBATCH {option}" for option in c.sbatch_options]
    lines += ["set -euo pipefail", *c.setup,
              shlex.join([python or c.python, "-m", "rlmesh", "launch",
                          str(Path(cluster_file).resolve()), *(["--resume"] if resume else [])])]
    return "\n".join(lines) + "\n"


def submit(script: str, folder: Path, *, test_only: bool = False) -> str:
    """sbatch the script (kept in ``folder``); the job id, or sbatch's answer with
    ``test_only``."""
    sbatch = need_tool("sbatch")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "submit.sbatch"
    path.write_text(script)
    argv = [sbatch, *(["--test-only"] if test_only else ["--parsable"]), str(path)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=folder)
    if done.returncode != 0:
        raise ProviderError(f"sbatch refused {path}: {(done.stderr or done.stdout).strip()}")
    if test_only:
        return (done.stderr + done.stdout).strip()
    return done.stdout.strip().split(";")[0]


def follow(job_id: str, output: Path, poll_s: float = 2.0) -> int:
    """Print the job's output file as it grows, until the job leaves the queue; its exit
    code as sacct/scontrol has it where they say, else 0."""
    import time

    squeue = need_tool("squeue")
    offset = 0
    while True:
        if output.exists():
            with open(output, "rb") as fh:
                fh.seek(offset)
                chunk = fh.read()
            offset += len(chunk)
            if chunk:
                sys.stdout.write(chunk.decode("utf-8", "replace"))
                sys.stdout.flush()
        queued = subprocess.run([squeue, "-h", "-j", job_id, "-o", "%T"], capture_output=True,
                                text=True, timeout=60)
        if queued.returncode != 0 or not queued.stdout.strip():
            break
        time.sleep(poll_s)
    if output.exists():
        with open(output, "rb") as fh:
            fh.seek(offset)
            rest = fh.read()
        sys.stdout.write(rest.decode("utf-8", "replace"))
        sys.stdout.flush()
    return _exit_code(job_id)


def _exit_code(job_id: str) -> int:
    scontrol = shutil.which("scontrol")
    if scontrol:
        done = subprocess.run([scontrol, "-o", "show", "job", job_id], capture_output=True,
                              text=True, timeout=60)
        m = re.search(r"\bExitCode=(\d+):(\d+)", done.stdout)
        if m:
            return int(m[1]) or (128 + int(m[2]) if int(m[2]) else 0)
    return 0
