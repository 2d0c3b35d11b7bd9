"""Put a suitable torch in this interpreter before `pip install` of rlmesh.

rlmesh asks for `torch>=2.1`; left to itself, pip would answer that with a CUDA build of
several GB even on a machine without a GPU. Run this first, with the venv's python:

    .venv/bin/python deploy/ensure_torch.py

The first rule that applies wins:
  0. RLMESH_TORCH_SPEC is set (e.g. "torch==2.4.1"): install exactly that.
  a. `import torch` already works here: keep it, install nothing.
  b. `nvidia-smi` is on PATH: install plain `torch` from the package index (a CUDA build:
     a GPU machine wants it).
  c. a local CPU wheel (torch-*+cpu*.whl) for this Python and platform lies in one of
     pip's find-links folders: install that version (no download).
  d. otherwise: install `torch` from PyTorch's CPU index (RLMESH_TORCH_INDEX_URL overrides).
RLMESH_TORCH_INDEX_URL, when set, is also used as the index for rules 0 and b.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

CPU_INDEX_URL = "https://download.pytorch.org/whl/cpu"

try:  # pip vendors packaging; a bare venv has pip but maybe not packaging itself
    from packaging.tags import sys_tags
    from packaging.utils import parse_wheel_filename
except ImportError:
    from pip._vendor.packaging.tags import sys_tags
    from pip._vendor.packaging.utils import parse_wheel_filename


def say(msg: str) -> None:
    print(f"[ensure_torch] {msg}", flush=True)


def installed_torch() -> str | None:
    """The version of an importable torch, or None."""
    try:
        with warnings.catch_warnings():  # e.g. "Failed to initialize NumPy" before numpy is in
            warnings.simplefilter("ignore")
            import torch
    except Exception:  # ImportError, or a broken install raising OSError etc.
        return None
    return str(torch.__version__)


def find_links_dirs() -> list[Path]:
    """Local folders pip is configured to search (config files and PIP_FIND_LINKS)."""
    values = [os.environ.get("PIP_FIND_LINKS", "")]
    out = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"],
        capture_output=True, text=True, check=False,
    ).stdout
    for line in out.splitlines():
        key, _, value = line.partition("=")
        if key.strip().endswith(".find-links"):
            values.append(value.strip().strip("'\""))
    dirs: list[Path] = []
    for value in values:
        for item in value.split():
            path = Path(item.removeprefix("file://"))
            if path.is_dir() and path not in dirs:
                dirs.append(path)
    return dirs


def local_cpu_wheel() -> tuple[Path, str] | None:
    """(wheel, version) of the newest local CPU torch wheel this interpreter can install."""
    supported = set(sys_tags())
    best: tuple[Path, str] | None = None
    best_version = None
    for folder in find_links_dirs():
        for wheel in folder.glob("torch-*+cpu*.whl"):
            try:
                name, version, _, tags = parse_wheel_filename(wheel.name)
            except Exception:
                continue
            if name == "torch" and tags & supported and (best_version is None or version > best_version):
                best, best_version = (wheel, str(version)), version
    return best


def pip_install(*args: str) -> None:
    cmd = [sys.executable, "-m", "pip", "install", *args]
    say("running: " + shlex.join(cmd))
    subprocess.run(cmd, check=True)


def main() -> int:
    index_url = os.environ.get("RLMESH_TORCH_INDEX_URL")
    index_args = ["--index-url", index_url] if index_url else []

    spec = os.environ.get("RLMESH_TORCH_SPEC")
    if spec:
        say(f"path 0: RLMESH_TORCH_SPEC is set; installing {spec!r}")
        pip_install(spec, *index_args)
        return 0

    version = installed_torch()
    if version:
        say(f"path a: torch {version} is already importable here; installing nothing")
        return 0

    if shutil.which("nvidia-smi"):
        say("path b: nvidia-smi found; installing torch from the package index (CUDA build)")
        pip_install("torch", *index_args)
        return 0

    local = local_cpu_wheel()
    if local:
        wheel, version = local
        say(f"path c: local CPU wheel {wheel}; installing torch=={version}")
        pip_install(f"torch=={version}")
        return 0

    cpu_index = index_url or CPU_INDEX_URL
    say(f"path d: no GPU and no local wheel; installing the CPU build from {cpu_index}")
    pip_install("torch", "--index-url", cpu_index)
    return 0


if __name__ == "__main__":
    sys.exit(main())
