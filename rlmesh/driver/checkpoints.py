"""The checkpoint format: a directory written atomically, no pickled classes.

    checkpoint_000010/
      rlmesh_checkpoint.msgpack   {"format": "rlmesh-checkpoint", "format_version": 3,
                                   "algorithm": "PPO", "config": {...},
                                   "policies": {policy_id: PolicySpec data},
                                   "counters": {...}, "created": unix time,
                                   "filters": {policy_id: {n, mean, m2} or None}}
      learner.pt                  torch.save({"policies": {policy_id: policy.get_state()},
                                              "num_updates": n}); read with weights_only=True;
                                  a TorchPolicy's state: {"model": state_dict, "optimizer":
                                  state_dict, "state": {...}, counters}

Version 1 (one policy, its state at the top of learner.pt) is read as ``default_policy``;
versions before 3 name the algorithm by import path.

``algorithm`` is a name of the registry (``registry.ALGORITHMS``), or the import path of an
algorithm outside it. Loading runs the code a checkpoint names (the algorithm, the env, policy
and model classes, callbacks), so a checkpoint that names code outside rlmesh loads only with
``trust_code`` (``--trust-code``), and one that names a file (``/tmp/x.py:f``) never does.

The directory is written under a temporary name and renamed into place, so a crash mid-save
leaves the previous checkpoint (and no half-written one) behind; the temporary directories
of a save whose process died are removed by the next save into the same folder.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import msgpack
import torch

from rlmesh.runtime.import_path import code_names, is_file
from rlmesh.env.registry import env_registry
from rlmesh.policy.module_model import modules_to_save
from rlmesh.policy.module_state import plain_data as _plain, write_modules
from rlmesh.runtime import handed

if TYPE_CHECKING:
    from rlmesh.driver.run_view import RunView

FORMAT = "rlmesh-checkpoint"
FORMAT_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
META = "rlmesh_checkpoint.msgpack"
STATE = "learner.pt"


class CheckpointError(ValueError):
    """A directory that is not a checkpoint this rlmesh can read."""


class UntrustedCode(CheckpointError):
    """A checkpoint that names code loading would run without ``trust_code`` (or a file)."""


def write(path: Path, algo: RunView, learner_state: dict[str, Any],
          policy_ids: list[str] | None = None) -> str:
    """Write the checkpoint of ``algo`` at ``path``; ``policy_ids``: of those policies only
    (a policy checkpoint, ``export_policy_checkpoint``), their states in ``learner_state``."""
    path = path.expanduser().resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(path.parent)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        _write_into(tmp, algo, learner_state, policy_ids)
    except BaseException as exc:  # a full disk: leave no half-written checkpoint taking space
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError) and exc.errno and exc.filename is None:  # at close(): say where
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise
    old = path.with_name(f".{path.name}.old-{os.getpid()}")
    if path.exists():
        path.rename(old)
    tmp.rename(path)
    shutil.rmtree(old, ignore_errors=True)
    _fsync_dir(path.parent)
    return str(path)


_TEMP_NAME = re.compile(r"^\.(.+)\.(tmp|old)-(\d+)$")


def remove_stale(folder: Path) -> list[Path]:
    """Remove the ``.NAME.tmp-PID`` and ``.NAME.old-PID`` directories in ``folder`` left by
    saves whose process ``PID`` is dead (killed mid-save); a live process's are its save in
    progress and stay. An ``.old`` whose ``NAME`` is missing (killed between the two
    renames) is the only copy of that checkpoint: it is put back. The directories removed."""
    removed = []
    try:
        entries = sorted(folder.iterdir())
    except OSError:  # gone, or not ours to read: nothing of ours to clean there
        return removed
    for entry in entries:
        match = _TEMP_NAME.match(entry.name)
        if not match or not entry.is_dir() or _writing(int(match.group(3)), entry):
            continue
        name, kind = match.group(1), match.group(2)
        if kind == "old" and not (folder / name).exists():
            entry.rename(folder / name)
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed


def remove_stale_under(root: Path, depth: int) -> list[Path]:
    """``remove_stale`` in ``root`` and its folders down to ``depth`` levels (a results
    root: experiments, then trials). A new run writes into a new trial folder, so the temp
    directories a killed run left in its own were never cleaned before (9 after 12 kills)."""
    removed = remove_stale(root)
    if depth > 0:
        try:
            folders = [e for e in root.iterdir() if e.is_dir() and not e.name.startswith(".")]
        except OSError:
            return removed
        for folder in folders:
            removed += remove_stale_under(folder, depth - 1)
    return removed


def _writing(pid: int, temp: Path) -> bool:
    """Whether process ``pid`` may still be writing ``temp``: it runs, is not a zombie (a
    killed child its parent has not reaped yet), and started before ``temp`` was last
    changed (else the pid was reused by a process that never wrote it)."""
    if pid == os.getpid():
        return True
    import psutil

    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        return process.create_time() <= temp.stat().st_mtime + 1.0
    except psutil.NoSuchProcess:
        return False
    except (psutil.AccessDenied, OSError):  # someone else's process, or temp just went
        return True


def _write_into(tmp: Path, algo: RunView, learner_state: dict[str, Any],
                policy_ids: list[str] | None = None) -> None:
    obs_filter = getattr(algo, "obs_filter", None)
    specs = {pid: spec for pid, spec in algo.policy_specs.items()
             if policy_ids is None or pid in policy_ids}
    meta = {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "algorithm": algorithm_name(algo),
        "config": algo.config.to_dict(),
        "policies": _plain(specs),
        "counters": {"training_iteration": algo.iteration, "timesteps_total": algo.timesteps_total,
                     "episodes_total": algo.episodes_total, "time_total_s": algo.time_total_s,
                     "num_env_steps_trained": algo.num_env_steps_trained},
        "created": time.time(),
        # observation_filter statistics by policy id ({n, mean, m2}; None for NoFilter)
        "filters": _plain({"default_policy": obs_filter.get_state() if obs_filter else None}),
    }
    connector_filters = getattr(algo, "connector_filters", None)
    if connector_filters is not None and connector_filters.stats:  # MeanStdFilter connectors'
        meta["connector_filters"] = _plain(connector_filters.get_state())
    registered = env_registry().get(algo.config.env) if isinstance(algo.config.env, str) else None
    if handed.is_token(registered):  # a lambda: written by its token, restored by name
        meta["handed_env"] = {"name": algo.config.env, "creator": registered}
    # Serialized in memory first: torch's own file writer turns a full disk into an
    # "enforce fail" RuntimeError, a plain write gives the OSError (ENOSPC) that says so.
    buffer = io.BytesIO()
    torch.save(learner_state, buffer)
    with open(tmp / STATE, "wb") as fh:
        fh.write(buffer.getbuffer())
    (tmp / META).write_bytes(msgpack.packb(meta, use_bin_type=True))
    # A user's RLModules also in RLlib's layout, for RLModule.from_checkpoint (module_state.py)
    write_modules(tmp, modules_to_save(algo.config, specs), learner_state.get("policies", {}))
    _fsync_dir(tmp)


def read(path: Path, trust_code: bool = False, trusted: Iterable[str] = ()
         ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The metadata and the learner state of the checkpoint at ``path``. CheckpointError if
    its metadata names code outside rlmesh (``trust_code`` False and not in ``trusted``: the
    paths the running process names itself) or a file (see ``check_code``)."""
    path = Path(path).expanduser()
    meta_path = path / META
    if not meta_path.is_file():
        raise CheckpointError(f"{path} is not an rlmesh checkpoint (no {META} in it)")
    try:
        meta = msgpack.unpackb(meta_path.read_bytes(), raw=False)
        if not isinstance(meta, dict):
            raise ValueError(f"a {type(meta).__name__}, not a map")
    except Exception as exc:  # truncated or overwritten: msgpack has many error types
        raise CheckpointError(f"{path} is damaged: its {META} cannot be read "
                              f"({_first_line(exc)})") from None
    if meta.get("format") != FORMAT or meta.get("format_version") not in READABLE_VERSIONS:
        raise CheckpointError(
            f"{path}: checkpoint format {meta.get('format')!r} version "
            f"{meta.get('format_version')!r}; this rlmesh reads {FORMAT!r} versions "
            f"{', '.join(map(str, READABLE_VERSIONS))}")
    check_code(path, meta, trust_code, set(trusted))
    try:
        state = torch.load(path / STATE, map_location="cpu", weights_only=True)
    except Exception as exc:  # truncated (a save cut short, a full disk) or not torch's
        raise CheckpointError(f"{path} is damaged: its {STATE} cannot be read "
                              f"({_first_line(exc)})") from None
    if meta["format_version"] == 1 and isinstance(state, dict):  # one policy, before keying
        state = {"policies": {"default_policy": state}, "num_updates": state.get("num_updates", 0)}
    check_state(path, state)
    return meta, state


def check_state(path: Path, state: Any) -> None:
    """CheckpointError unless ``state`` holds a state per policy, and every floating-point
    tensor of a policy's ``model`` is finite: weights saved from a run that diverged would
    load silently and act (or train) on NaN."""
    policies = state.get("policies") if isinstance(state, dict) else None
    if not isinstance(policies, dict) or not policies:
        raise CheckpointError(f"{path} is damaged: its {STATE} holds no policy states (no "
                              "'policies' map); load another checkpoint of the run")
    for pid, policy_state in policies.items():
        if not isinstance(policy_state, dict):
            raise CheckpointError(f"{path} is damaged: the state of policy {pid!r} in its "
                                  f"{STATE} is a {type(policy_state).__name__}, not a map")
        for name, tensor in _weights(policy_state):
            if not bool(torch.isfinite(tensor).all()):
                kind = "nan" if bool(torch.isnan(tensor).any()) else "inf"
                raise CheckpointError(
                    f"{path}: policy {pid!r} has non-finite weights ({kind} in {name!r}): it "
                    "was saved from a run that diverged; load an earlier checkpoint")


def _weights(policy_state: dict[str, Any]) -> Iterable[tuple[str, torch.Tensor]]:
    """The floating-point weights of a policy's state: a TorchPolicy's ``model`` state_dict,
    or the ``weights`` of another Policy (tensors or arrays)."""
    for key in ("model", "weights"):
        weights = policy_state.get(key)
        for name, value in (weights.items() if isinstance(weights, dict) else ()):
            if hasattr(value, "dtype") and not torch.is_tensor(value):
                try:
                    value = torch.as_tensor(value)
                except (TypeError, RuntimeError):  # an object array: not weights
                    continue
            if torch.is_tensor(value) and value.is_floating_point():
                yield str(name), value


def load_policy(path: Path, policy: Any, state: dict[str, Any], policy_id: str,
                algorithm: Any) -> None:
    """``policy.set_state`` from a checkpoint's state, or a CheckpointError saying that the
    checkpoint does not fit (a key missing, other layer sizes: another algorithm or env)."""
    try:
        policy.set_state(state["policies"][policy_id])
    except (KeyError, RuntimeError, ValueError, TypeError) as exc:
        text = str(exc.args[0] if exc.args else exc)
        if isinstance(exc, KeyError):
            text = f"its state lacks {exc.args[0]!r}" if exc.args else "a key is missing"
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        raise CheckpointError(
            f"{path}: policy {policy_id!r} of this {algorithm} checkpoint does not fit the "
            f"policy it builds: {' '.join(lines[:2])[:300]}") from None


def check_handed(path: Path, meta: dict[str, Any]) -> None:
    """One line when the run used a lambda or a local definition (runtime/handed.py) that
    this process was not given: a checkpoint holds no pickle, only the lambda's token."""
    config = meta.get("config") or {}
    env = (meta.get("handed_env") or {}).get("name")
    if env is not None and config.get("env") == env and env not in env_registry():
        raise CheckpointError(
            f"env {env!r} was registered with {meta['handed_env']['creator']} in the process "
            f"that saved {path}: call register_env({env!r}, ...) in this process before "
            "restoring (as with RLlib)")
    for where, token in handed.tokens_in(config):
        try:
            handed.resolve(token)
        except handed.NotHanded:
            raise CheckpointError(
                f"{where} was {token} in the process that saved {path}, and a lambda is not "
                "saved: build the config again in this process and call algo.restore(path), "
                "or define it at module level") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def algorithm_class(name: str) -> type:
    """The Algorithm class a checkpoint names (checked by ``check_code`` already)."""
    from rlmesh.driver.algorithm_registry import ALGORITHMS, get_algorithm_class
    from rlmesh.runtime.import_path import import_object

    return get_algorithm_class(name) if name in ALGORITHMS else import_object(name, "algorithm")


def algorithm_name(algo: RunView) -> str:
    """``algo``'s name in the registry, or the import path of its class if it has none."""
    from rlmesh.driver.algorithm_registry import registered_name

    return registered_name(type(algo)) or f"{type(algo).__module__}:{type(algo).__qualname__}"


def code_of(algo: RunView) -> set[str]:
    """The code ``algo``'s own config and policies name: what its process runs already."""
    data = {"config": algo.config.to_dict(), "policies": _plain(algo.policy_specs)}
    return {value for _, value in code_names(data)}


def check_code(path: Path, meta: dict[str, Any], trust_code: bool, trusted: set[str]) -> None:
    """CheckpointError unless every piece of code ``meta`` names is rlmesh's own, is in
    ``trusted``, or ``trust_code`` is set; a file path (``.py``) is refused even then: a
    checkpoint never picks a file to run (only the script this process runs is found)."""
    from rlmesh.driver.algorithm_registry import ALGORITHMS

    names = list(code_names({"config": meta.get("config"), "policies": meta.get("policies")}))
    algorithm = meta.get("algorithm")
    if algorithm not in ALGORITHMS:
        names.insert(0, ("algorithm", str(algorithm)))
    for where, value in names:
        module = value.partition(":")[0]
        if module == "rlmesh" or module.startswith("rlmesh.") or value in trusted:
            continue
        if is_file(module):
            if _is_main_script(module) and trust_code:
                continue
            raise UntrustedCode(
                f"{path}: its {where} names the file {module!r}; rlmesh never runs a file named "
                "by a checkpoint (name code by module path, 'pkg.module:name')")
        if not trust_code:
            raise UntrustedCode(
                f"{path}: its {where} names code outside rlmesh ({value!r}), which loading "
                "would import and run; if you trust where the checkpoint came from, load it "
                "with --trust-code (Python: trust_code=True)")


def _is_main_script(file: str) -> bool:
    """Whether ``file`` is the script this process runs (then nothing new would run)."""
    main = sys.modules.get("__main__")
    return bool(getattr(main, "__file__", None)) and os.path.abspath(main.__file__) == file


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
