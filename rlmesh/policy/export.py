"""``export_model``: a policy's model written as TorchScript (``model.pt``) or ONNX
(``model.onnx``) plus ``metadata.json``, loadable with plain torch or onnxruntime, without
rlmesh installed. Docs: docs/export.md."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlmesh.rl.layers import Tanh

TORCHSCRIPT_FILE = "model.pt"
ONNX_FILE = "model.onnx"
METADATA_FILE = "metadata.json"

# Traced on one batch size and checked on another with other observations, so a graph
# that baked in the batch size or the values it saw fails the check.
TRACE_BATCH, CHECK_BATCH = 3, 5
RTOL, ATOL = 1e-4, 1e-5

OUTPUTS = {
    "dist_inputs": "[N, num_outputs] float32: the inputs of the action distribution, as the "
    "model's forward returns them (logits for a Discrete action space; for a Box one, the "
    "Gaussian's means followed by its log standard deviations)",
    "value": "[N] float32: the value function's estimate for each observation",
}


class _Exported(nn.Module):
    """The model with its outputs as a plain ``(dist_inputs, value)`` tuple, whatever
    sequence type its forward returns."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        dist_inputs, value = self.model(obs)
        return dist_inputs, value


def export_model(
    model: torch.nn.Module, obs_space: gym.Space, export_dir: str | Path, onnx: int | None = None
) -> Path:
    """Write ``model`` to ``export_dir`` and return the path of the model file.

    Without ``onnx``: ``model.pt``, TorchScript for ``torch.jit.load``. With ``onnx=OPSET``:
    ``model.onnx`` at that opset instead (needs ``pip install rlmesh[onnx]``). Either takes
    a batch of raw observations ``[N, *obs_space.shape]`` (the space's dtype: int64 for
    Discrete, float32 for a float32 Box) and returns ``(dist_inputs, value)`` as the
    model's forward does. ``metadata.json`` beside it says what goes in and comes out.
    The caller's model is left as it is: a CPU copy in eval mode is exported.
    """
    if onnx is not None:
        _require_onnx()
    export_dir = Path(export_dir)
    _check_export_dir(export_dir)
    check_obs = _sample_obs(obs_space, CHECK_BATCH, seed=1)
    copied = copy.deepcopy(model).cpu().eval().requires_grad_(False)
    with torch.no_grad():
        expected = _call(copied, check_obs)
        traced = _trace(_Exported(_plain_tanh(copied)), obs_space, check_obs, expected)

    if onnx is None:
        name, data = TORCHSCRIPT_FILE, _torchscript_bytes(traced)
    else:
        name, data = ONNX_FILE, _onnx_bytes(traced, obs_space, onnx)
    metadata = _metadata(model, obs_space, name, num_outputs=expected[0].shape[1], opset=onnx)
    _write(export_dir / name, data)
    _write(export_dir / METADATA_FILE, json.dumps(metadata, indent=2).encode() + b"\n")
    return export_dir / name


def _require_onnx() -> None:
    try:
        import onnx  # noqa: F401  (torch.onnx.export needs it, and the checker below)
    except ImportError:
        raise ImportError(
            "export_model(onnx=...) needs the onnx package: pip install rlmesh[onnx]"
        ) from None


def _check_export_dir(export_dir: Path) -> None:
    """Fail before the work when the directory cannot be one (``_write`` catches the rest)."""
    for path in (export_dir, *export_dir.parents):
        if path.exists():
            if not path.is_dir():
                raise NotADirectoryError(
                    f"export_model: {path} is a file, so {export_dir} cannot be the export directory"
                )
            return


def _sample_obs(obs_space: gym.Space, n: int, seed: int) -> torch.Tensor:
    """``n`` observations of the space, as the batch tensor the exported graph takes. The
    space is copied so the caller's space keeps its random state."""
    if obs_space.shape is None or obs_space.dtype is None:
        raise ValueError(
            f"export_model takes observations that are one array (Box, Discrete, MultiDiscrete, "
            f"MultiBinary), got {obs_space}"
        )
    space = copy.deepcopy(obs_space)
    space.seed(seed)
    return torch.as_tensor(np.stack([np.asarray(space.sample(), dtype=space.dtype) for _ in range(n)]))


def _call(model: nn.Module, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's ``(dist_inputs [N, k], value [N])``, or an error saying what it returned."""
    out = model(obs)
    n = obs.shape[0]
    ok = (
        isinstance(out, (tuple, list)) and len(out) == 2 and all(isinstance(t, torch.Tensor) for t in out)
        and out[0].ndim == 2 and out[0].shape[0] == n and tuple(out[1].shape) == (n,)
    )
    if not ok:
        raise ValueError(
            f"export_model: {type(model).__name__}.forward(obs) must return (dist_inputs "
            f"[N, num_outputs], value [N]) for a batch of N={n} observations, got {_describe(out)}"
        )
    return out[0], out[1]


def _describe(out: object) -> str:
    if not isinstance(out, (tuple, list)):
        return type(out).__name__
    return str(tuple(tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__ for t in out))


def _plain_tanh(model: nn.Module) -> nn.Module:
    """``model`` (a copy, changed in place) with each rlmesh ``Tanh`` made ``nn.Tanh``: the
    rlmesh one calls numpy on CPU, which a trace would record as constants."""
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, Tanh):
                setattr(parent, name, nn.Tanh())
    return model


def _trace(
    wrapper: _Exported,
    obs_space: gym.Space,
    check_obs: torch.Tensor,
    expected: tuple[torch.Tensor, torch.Tensor],
) -> torch.jit.ScriptModule:
    """The traced wrapper, checked against the eager model on observations it was not traced
    on; an error naming the model class when the trace fails or computes something else."""
    cls = type(wrapper.model).__name__
    advice = (
        f"export_model traces {cls}.forward(obs): it must use torch operations on the observation "
        "tensor only (no numpy, .item(), .tolist(), custom autograd.Function, or Python branches on "
        "tensor values); replace such code with torch operations, or export a model class that does"
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _ignore_torchscript_deprecation()
        try:
            trace_obs = _sample_obs(obs_space, TRACE_BATCH, seed=0)
            traced = torch.jit.trace(wrapper, trace_obs, check_trace=False)
            got = traced(check_obs)
        except Exception as exc:
            raise ValueError(
                f"cannot export {cls}: tracing it or running the trace failed "
                f"({type(exc).__name__}: {exc}). {advice}"
            ) from exc
    # A Python call (an autograd.Function) traces and runs, but torch cannot save it.
    nodes = traced.inlined_graph.nodes()
    python_calls = sorted({n.pyname() for n in nodes if n.kind() == "prim::PythonOp"})
    if python_calls:
        raise ValueError(
            f"cannot export {cls}: its forward calls Python functions ({', '.join(python_calls)}), "
            f"which TorchScript and ONNX cannot hold. {advice}"
        )
    tracer_notes = [str(w.message) for w in caught if issubclass(w.category, torch.jit.TracerWarning)]
    same = (g.shape == e.shape and torch.allclose(g, e, rtol=RTOL, atol=ATOL) for g, e in zip(got, expected))
    if not all(same):
        notes = f" Tracer warnings: {' | '.join(tracer_notes)}." if tracer_notes else ""
        raise ValueError(
            f"cannot export {cls}: the traced graph gives other outputs than {cls}.forward on other "
            f"observations, so the trace recorded values instead of computing them.{notes} {advice}"
        )
    for w in caught:  # the check passed; what the trace noted about the model still counts
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return traced


def _ignore_torchscript_deprecation() -> None:
    """Within a ``catch_warnings`` block: drop torch's notices (2.13) that TorchScript is
    deprecated. The format is chosen here, not by the caller, who cannot act on them; the
    choice is recorded in docs/export.md."""
    warnings.filterwarnings("ignore", message=r"`torch\.jit\.\w+` is deprecated", category=DeprecationWarning)


def _torchscript_bytes(traced: torch.jit.ScriptModule) -> bytes:
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        _ignore_torchscript_deprecation()
        torch.jit.save(traced, buffer)
    return buffer.getvalue()


def _onnx_bytes(traced: torch.jit.ScriptModule, obs_space: gym.Space, opset: int) -> bytes:
    """The checked trace converted by torch's TorchScript-based exporter, so model.onnx and
    model.pt compute one graph. The torch.export-based one (torch's default since 2.9) took
    5.1-6.4 s for a process's first export of the default model against 0.36-0.48 s for all
    of export_model this way (docs/export.md), and needs onnxscript and a newer torch."""
    import onnx as onnx_pkg

    buffer = io.BytesIO()
    batch_axis = {0: "batch"}
    with warnings.catch_warnings():
        # Its own deprecation notice, and a note that a ScriptModule has no Python signature.
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", message="no signature found")
        try:
            torch.onnx.export(
                traced, (_sample_obs(obs_space, TRACE_BATCH, seed=0),), buffer, dynamo=False,
                input_names=["obs"], output_names=list(OUTPUTS), opset_version=int(opset),
                dynamic_axes={"obs": batch_axis, "dist_inputs": batch_axis, "value": batch_axis},
            )
        except Exception as exc:
            raise ValueError(f"ONNX export at opset {opset} failed: {type(exc).__name__}: {exc}") from exc
    onnx_pkg.checker.check_model(onnx_pkg.load_from_string(buffer.getvalue()))
    return buffer.getvalue()


def _metadata(
    model: nn.Module, obs_space: gym.Space, file: str, num_outputs: int, opset: int | None
) -> dict:
    meta = {
        "format": "onnx" if opset is not None else "torchscript",
        "file": file,
        "model_class": f"{type(model).__module__}.{type(model).__qualname__}",
        "observation": {
            "shape": ["N", *obs_space.shape],
            "dtype": np.dtype(obs_space.dtype).name,
            "space": repr(obs_space),
            "raw": "observations as the env returns them; preprocessing (one-hot for Discrete) "
            "is in the graph",
        },
        "num_outputs": int(num_outputs),
        "outputs": OUTPUTS,
        "torch_version": torch.__version__,
    }
    if opset is not None:
        meta["onnx_opset"] = int(opset)
    return meta


def _write(path: Path, data: bytes) -> None:
    """Write through a temporary file, so a failed export never leaves half a model file."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise OSError(exc.errno, f"export_model cannot write {path}: {exc.strerror or exc}") from exc
