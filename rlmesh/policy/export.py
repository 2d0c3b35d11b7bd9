"""``export_model``: a policy's model written as TorchScript (``model.pt``) or ONNX
(``model.onnx``) plus ``metadata.json``, loadable with plain torch or onnxruntime, without
rlmesh installed; a recurrent model with its state as inputs and outputs
(``export_recurrent.py``). Docs: docs/export.md."""

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

from rlmesh.policy.export_recurrent import (RecurrentStep, StepGraph, check_step_outputs,
                                            recurrent_graph, sample_inputs)
from rlmesh.policy.recurrent import is_recurrent
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
    model: torch.nn.Module, obs_space: gym.Space, export_dir: str | Path, onnx: int | None = None,
    action_space: gym.Space | None = None,
) -> Path:
    """Write ``model`` to ``export_dir`` and return the path of the model file.

    Without ``onnx``: ``model.pt``, TorchScript for ``torch.jit.load``. With ``onnx=OPSET``:
    ``model.onnx`` at that opset instead (needs ``pip install rlmesh[onnx]``). Either takes
    a batch of raw observations ``obs`` ``[N, *obs_space.shape]`` (the space's dtype: int64
    for Discrete, float32 for a float32 Box) and returns ``(dist_inputs, value)`` as the
    model's forward does. A recurrent model (``is_recurrent``: ``use_lstm``) is one step for
    N envs instead: ``(obs, state_in_0..k[, prev_actions][, prev_rewards]) -> (dist_inputs,
    value, state_out_0..k)``; ``action_space`` (default ``model.action_space``) is needed
    where it reads previous actions. ``metadata.json`` beside it says what goes in and
    comes out. The caller's model is left as it is: a CPU copy in eval mode is exported.
    """
    if onnx is not None:
        _require_onnx()
    export_dir = Path(export_dir)
    _check_export_dir(export_dir)
    copied = copy.deepcopy(model).cpu().eval().requires_grad_(False)
    action_space = action_space if action_space is not None else getattr(model, "action_space", None)
    graph = _graph(copied, action_space)
    trace_in = _inputs(graph, obs_space, action_space, TRACE_BATCH, seed=0)
    check_in = _inputs(graph, obs_space, action_space, CHECK_BATCH, seed=1)
    with torch.no_grad():
        expected = _expected(graph, check_in)
        _plain_tanh(copied)  # after the eager outputs: the check compares with the model as it is
        traced = _trace(graph, trace_in, check_in, expected)

    if onnx is None:
        name, data = TORCHSCRIPT_FILE, _torchscript_bytes(traced)
    else:
        name, data = ONNX_FILE, _onnx_bytes(traced, graph, trace_in, onnx)
    metadata = _metadata(model, obs_space, graph, name, num_outputs=expected[0].shape[1], opset=onnx)
    _write(export_dir / name, data)
    _write(export_dir / METADATA_FILE, json.dumps(metadata, indent=2).encode() + b"\n")
    return export_dir / name


def _graph(model: nn.Module, action_space: gym.Space | None) -> StepGraph:
    """What is traced: the model's forward, or one recurrent step with its state."""
    if is_recurrent(model):
        return recurrent_graph(model, action_space)
    inputs = {"obs": "[N, *obs_shape]: a batch of observations, raw as the env returns them"}
    return StepGraph(_Exported(model), ["obs"], list(OUTPUTS), inputs, dict(OUTPUTS))


def _inputs(graph: StepGraph, obs_space: gym.Space, action_space: gym.Space | None, n: int,
            seed: int) -> tuple[torch.Tensor, ...]:
    obs = _sample_obs(obs_space, n, seed)
    if isinstance(graph.module, RecurrentStep):
        return sample_inputs(graph, obs, action_space, seed)
    return (obs,)


def _expected(graph: StepGraph, inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """The eager outputs on ``inputs``, checked for the shapes the export promises."""
    if isinstance(graph.module, RecurrentStep):
        return check_step_outputs(graph, graph.module(*inputs), inputs[0].shape[0])
    return _call(graph.module.model, inputs[0])


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
    graph: StepGraph,
    trace_in: tuple[torch.Tensor, ...],
    check_in: tuple[torch.Tensor, ...],
    expected: tuple[torch.Tensor, ...],
) -> torch.jit.ScriptModule:
    """The traced graph, checked against the eager model on inputs it was not traced on; an
    error naming the model class when the trace fails or computes something else."""
    cls = type(graph.module.model).__name__
    method = "forward_seq(obs, state)" if isinstance(graph.module, RecurrentStep) else "forward(obs)"
    advice = (
        f"export_model traces {cls}.{method}: it must use torch operations on its input "
        "tensors only (no numpy, .item(), .tolist(), custom autograd.Function, or Python branches on "
        "tensor values); replace such code with torch operations, or export a model class that does"
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _ignore_torchscript_deprecation()
        try:
            traced = torch.jit.trace(graph.module, trace_in, check_trace=False)
            got = traced(*check_in)
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
    caught = [w for w in caught if not _lstm_shape_check(w)]
    tracer_notes = [str(w.message) for w in caught if issubclass(w.category, torch.jit.TracerWarning)]
    same = (g.shape == e.shape and torch.allclose(g, e, rtol=RTOL, atol=ATOL) for g, e in zip(got, expected))
    if len(got) != len(expected) or not all(same):
        notes = f" Tracer warnings: {' | '.join(tracer_notes)}." if tracer_notes else ""
        raise ValueError(
            f"cannot export {cls}: the traced graph gives other outputs than {cls}.{method} on other "
            f"inputs, so the trace recorded values instead of computing them.{notes} {advice}"
        )
    for w in caught:  # the check passed; what the trace noted about the model still counts
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return traced


def _lstm_shape_check(w: warnings.WarningMessage) -> bool:
    """The tracer's note on ``nn.LSTM``'s own check of the state's shape (a Python branch it
    records as constant): the trace is run on another batch size and compared, so the note
    says nothing the caller could act on."""
    return (issubclass(w.category, torch.jit.TracerWarning)
            and Path(w.filename).as_posix().endswith("torch/nn/modules/rnn.py"))


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


def _onnx_bytes(traced: torch.jit.ScriptModule, graph: StepGraph, trace_in: tuple[torch.Tensor, ...],
                opset: int) -> bytes:
    """The checked trace converted by torch's TorchScript-based exporter, so model.onnx and
    model.pt compute one graph. The torch.export-based one (torch's default since 2.9) took
    5.1-6.4 s for a process's first export of the default model against 0.36-0.48 s for all
    of export_model this way (docs/export.md), and needs onnxscript and a newer torch."""
    import onnx as onnx_pkg

    buffer = io.BytesIO()
    names = graph.input_names + graph.output_names
    with warnings.catch_warnings():
        # Its own deprecation notice, and a note that a ScriptModule has no Python signature.
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", message="no signature found")
        # Its advice for an LSTM whose state is not an input: here it is (state_in_i), and
        # tests/unit/test_export_recurrent.py runs the file at another batch size.
        warnings.filterwarnings("ignore", message="Exporting a model to ONNX with a batch_size other than 1")
        try:
            torch.onnx.export(
                traced, trace_in, buffer, dynamo=False, input_names=graph.input_names,
                output_names=graph.output_names, opset_version=int(opset),
                dynamic_axes={name: {0: "batch"} for name in names},
            )
        except Exception as exc:
            raise ValueError(f"ONNX export at opset {opset} failed: {type(exc).__name__}: {exc}") from exc
    onnx_pkg.checker.check_model(onnx_pkg.load_from_string(buffer.getvalue()))
    return buffer.getvalue()


def _metadata(
    model: nn.Module, obs_space: gym.Space, graph: StepGraph, file: str, num_outputs: int,
    opset: int | None,
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
        "recurrent": isinstance(graph.module, RecurrentStep),
        "inputs": graph.inputs,
        "outputs": graph.outputs,
        "torch_version": torch.__version__,
    }
    if graph.initial_state:
        meta["initial_state"] = [s.tolist() for s in graph.initial_state]
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
