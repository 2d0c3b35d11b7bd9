"""export_model: the exported TorchScript and ONNX files, loaded in a fresh interpreter where
rlmesh cannot be imported, compute what the model computes; metadata; errors."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from rlmesh.policy.export import export_model
from rlmesh.rl.layers import Tanh
from rlmesh.rl.default_model import build_model, preprocess_obs

CASES = {
    "box_obs_discrete_act": (gym.spaces.Box(-1.0, 1.0, (4,), np.float32), gym.spaces.Discrete(2)),
    "discrete_obs": (gym.spaces.Discrete(5, start=2), gym.spaces.Discrete(3)),
    "box_act": (gym.spaces.Box(-2.0, 2.0, (3,), np.float32), gym.spaces.Box(-1.0, 1.0, (2,), np.float32)),
}
BATCH = 7  # neither the batch export_model traces on nor the one it checks on

# The child runs with -I and cwd in a temp dir. -I alone does not hide rlmesh where it is
# installed editable (the venv's .pth finder still runs), so the child also refuses it on
# sys.meta_path before loading anything: a model file that needs rlmesh then fails to load.
CHILD = textwrap.dedent(
    """
    import json, sys

    class NoRlmesh:
        def find_spec(self, name, path=None, target=None):
            if name == "rlmesh" or name.startswith("rlmesh."):
                raise ImportError("rlmesh is hidden from this process")

    sys.meta_path.insert(0, NoRlmesh())
    try:
        import rlmesh
    except ImportError:
        pass
    else:
        sys.exit("rlmesh is importable in the child")

    import numpy as np
    fmt, dirs = sys.argv[1], sys.argv[2:]
    if fmt == "torchscript":
        import torch
        def run(d, obs):
            dist_inputs, value = torch.jit.load(d + "/model.pt")(torch.from_numpy(obs))
            return dist_inputs.numpy(), value.numpy()
    else:
        import onnxruntime
        def run(d, obs):
            session = onnxruntime.InferenceSession(d + "/model.onnx", providers=["CPUExecutionProvider"])
            return session.run(["dist_inputs", "value"], {"obs": obs})
    out = {}
    for d in dirs:
        dist_inputs, value = run(d, np.load(d + "/obs.npy"))
        out[d] = [dist_inputs.tolist(), value.tolist()]
    print(json.dumps(out))
    assert "rlmesh" not in sys.modules
    """
)


def run_child(tmp_dir: Path, fmt: str, dirs: list[Path]) -> dict[str, list]:
    script = tmp_dir / "load_exported.py"
    script.write_text(CHILD)
    proc = subprocess.run(
        [sys.executable, "-I", str(script), fmt, *map(str, dirs)],
        cwd=tmp_dir, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def model_for(case: str) -> tuple[nn.Module, gym.Space]:
    obs_space, action_space = CASES[case]
    torch.manual_seed(0)
    return build_model(obs_space, action_space, {"fcnet_hiddens": [32, 32]}), obs_space


def fixed_obs(obs_space: gym.Space) -> np.ndarray:
    if isinstance(obs_space, gym.spaces.Discrete):
        return (obs_space.start + np.arange(BATCH) % obs_space.n).astype(np.int64)
    return np.linspace(obs_space.low, obs_space.high, BATCH).astype(np.float32)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], tuple[Path, tuple]]:
    """(case, format) -> (export dir holding obs.npy, the in-process model's outputs on it)."""
    formats = {"torchscript": None}
    if _importable("onnx"):
        formats["onnx"] = 17
    out = {}
    for case in CASES:
        model, obs_space = model_for(case)
        obs = fixed_obs(obs_space)
        with torch.no_grad():
            dist_inputs, value = model(torch.from_numpy(obs))
        for fmt, opset in formats.items():
            export_dir = tmp_path_factory.mktemp(f"{case}-{fmt}")
            export_model(model, obs_space, export_dir, onnx=opset)
            np.save(export_dir / "obs.npy", obs)
            out[case, fmt] = export_dir, (dist_inputs.numpy(), value.numpy())
    return out


def _importable(name: str) -> bool:
    try:
        __import__(name)
    except ImportError:
        return False
    return True


def check_in_child(exported: dict, fmt: str, tmp_path: Path) -> None:
    dirs = {case: exported[case, fmt][0] for case in CASES}
    got = run_child(tmp_path, fmt, list(dirs.values()))
    for case, export_dir in dirs.items():
        expected_dist_inputs, expected_value = exported[case, fmt][1]
        dist_inputs, value = (np.asarray(a) for a in got[str(export_dir)])
        assert dist_inputs.shape == expected_dist_inputs.shape == (BATCH, dist_inputs.shape[1]), case
        assert value.shape == expected_value.shape == (BATCH,), case
        assert np.allclose(dist_inputs, expected_dist_inputs, rtol=1e-4, atol=1e-5), case
        assert np.allclose(value, expected_value, rtol=1e-4, atol=1e-5), case


def test_torchscript_loads_without_rlmesh_and_matches_model(exported, tmp_path):
    check_in_child(exported, "torchscript", tmp_path)


def test_onnx_runs_in_onnxruntime_without_rlmesh_and_matches_model(exported, tmp_path):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    check_in_child(exported, "onnx", tmp_path)


def test_onnx_file_passes_checker_with_a_dynamic_batch_axis(exported):
    onnx = pytest.importorskip("onnx")
    model = onnx.load(str(exported["discrete_obs", "onnx"][0] / "model.onnx"))
    onnx.checker.check_model(model)
    (obs,) = model.graph.input
    assert obs.type.tensor_type.elem_type == onnx.TensorProto.INT64  # raw Discrete observations
    for value_info in (obs, *model.graph.output):
        assert value_info.type.tensor_type.shape.dim[0].dim_param == "batch"


def test_metadata_describes_inputs_and_outputs(exported):
    meta = json.loads((exported["discrete_obs", "torchscript"][0] / "metadata.json").read_text())
    assert meta["format"] == "torchscript" and meta["file"] == "model.pt"
    assert meta["observation"]["shape"] == ["N"] and meta["observation"]["dtype"] == "int64"
    assert meta["num_outputs"] == 3
    assert set(meta["outputs"]) == {"dist_inputs", "value"}
    meta = json.loads((exported["box_act", "torchscript"][0] / "metadata.json").read_text())
    assert meta["observation"]["shape"] == ["N", 3] and meta["observation"]["dtype"] == "float32"
    assert meta["num_outputs"] == 4  # Gaussian: 2 means, 2 log-stds


def test_callers_model_is_left_as_it_was(tmp_path):
    model, obs_space = model_for("box_obs_discrete_act")
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    export_model(model, obs_space, tmp_path)
    assert model.training
    assert any(isinstance(m, Tanh) for m in model.modules())
    assert all(p.requires_grad for p in model.parameters())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


class NumpyInForward(nn.Module):
    """A model whose forward leaves torch: a trace records its numpy result as a constant."""

    def __init__(self, obs_space: gym.Space):
        super().__init__()
        self.obs_space = obs_space
        self.pi = nn.Linear(4, 2)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.from_numpy(np.tanh(preprocess_obs(obs, self.obs_space).numpy()))
        return self.pi(x), x.sum(-1)


class _Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * x


class AutogradFunctionInForward(NumpyInForward):
    """Traces and runs (the trace calls back into Python) but cannot be saved."""

    def forward(self, obs):
        x = _Square.apply(preprocess_obs(obs, self.obs_space))
        return self.pi(x), x.sum(-1)


class DictOutput(NumpyInForward):
    def forward(self, obs):
        return {"logits": self.pi(obs)}


def test_untraceable_forward_is_an_error_naming_the_model(tmp_path):
    obs_space = CASES["box_obs_discrete_act"][0]
    with pytest.raises(ValueError, match="NumpyInForward.*torch operations"):
        export_model(NumpyInForward(obs_space), obs_space, tmp_path)
    with pytest.raises(ValueError, match="AutogradFunctionInForward.*calls Python functions \\(_Square\\)"):
        export_model(AutogradFunctionInForward(obs_space), obs_space, tmp_path)
    with pytest.raises(ValueError, match=r"DictOutput.forward\(obs\) must return"):
        export_model(DictOutput(obs_space), obs_space, tmp_path)
    assert not (tmp_path / "model.pt").exists()


def test_export_dir_that_is_a_file_is_an_error(tmp_path):
    model, obs_space = model_for("box_obs_discrete_act")
    a_file = tmp_path / "taken"
    a_file.write_text("")
    for export_dir in (a_file, a_file / "sub"):
        with pytest.raises(NotADirectoryError, match="taken is a file"):
            export_model(model, obs_space, export_dir)


def test_export_dir_is_created(tmp_path):
    model, obs_space = model_for("box_obs_discrete_act")
    path = export_model(model, obs_space, tmp_path / "a" / "b")
    assert path == tmp_path / "a" / "b" / "model.pt" and path.is_file()
    assert sorted(p.name for p in path.parent.iterdir()) == ["metadata.json", "model.pt"]


def test_onnx_without_the_onnx_package_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)  # makes `import onnx` raise ImportError
    model, obs_space = model_for("box_obs_discrete_act")
    with pytest.raises(ImportError, match=r"pip install rlmesh\[onnx\]"):
        export_model(model, obs_space, tmp_path, onnx=17)
