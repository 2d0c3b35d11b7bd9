"""RLModules in checkpoints, in RLlib's component layout:

    checkpoint_000010/learner_group/learner/rl_module/<module_id>/
      module_spec.msgpack   {"module_class": "pkg.mod:Cls", "observation_space": ...,
                             "action_space": ..., "model_config": {...}}
      module_state.pt       the module's state_dict (torch.save; read with weights_only)

written beside rlmesh's own files for each policy whose network is a user's RLModule, so
``RLModule.from_checkpoint(<that dir>)`` builds the trained module without the algorithm
(RLlib's idiom for serving), and ``RLModuleSpec(load_state_path=<that dir>)`` starts a new
run from its weights. Restoring the algorithm reads rlmesh's own files, not these.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import msgpack
import torch

#: Where the modules go inside a checkpoint directory.
MODULES_DIR = Path("learner_group") / "learner" / "rl_module"
SPEC_FILE = "module_spec.msgpack"
STATE_FILE = "module_state.pt"
_PREFIX = "module."  # the module's parameters inside its policy's model (ModuleModel)


def write_modules(checkpoint: Path, modules: dict[str, dict[str, Any]],
                  policy_states: dict[str, Any]) -> None:
    """For each policy id in ``modules`` (its module spec data, spaces filled in), its
    module's dir under ``checkpoint``, from the policy's model state in ``policy_states``."""
    for pid, spec in modules.items():
        model_state = (policy_states.get(pid) or {}).get("model")
        if not model_state:
            continue
        folder = checkpoint / MODULES_DIR / pid
        folder.mkdir(parents=True, exist_ok=True)
        state = {k[len(_PREFIX):]: v for k, v in model_state.items() if k.startswith(_PREFIX)}
        buffer = io.BytesIO()
        torch.save(state, buffer)
        (folder / STATE_FILE).write_bytes(buffer.getbuffer())
        (folder / SPEC_FILE).write_bytes(msgpack.packb(plain_data(spec), use_bin_type=True))


def plain_data(data: Any) -> Any:
    """``data`` with numpy arrays (a Box space's bounds) as lists, for msgpack."""
    if isinstance(data, dict):
        return {k: plain_data(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [plain_data(v) for v in data]
    return data.tolist() if hasattr(data, "tolist") else data


def read_module_state(path: str | Path) -> dict[str, Any]:
    """A module dir's weights (parameter name -> tensor)."""
    file = Path(path) / STATE_FILE
    if not file.is_file():
        raise FileNotFoundError(f"{path} holds no {STATE_FILE}: give a module's dir of an rlmesh "
                                f"checkpoint (<checkpoint>/{MODULES_DIR}/<module_id>)")
    return torch.load(file, map_location="cpu", weights_only=True)


def read_module_spec(path: str | Path) -> dict[str, Any]:
    file = Path(path) / SPEC_FILE
    if not file.is_file():
        raise FileNotFoundError(f"{path} holds no {SPEC_FILE}: give a module's dir of an rlmesh "
                                f"checkpoint (<checkpoint>/{MODULES_DIR}/<module_id>)")
    return msgpack.unpackb(file.read_bytes(), raw=False)


def load_module(path: str | Path, module_class: Any = None) -> Any:
    """The trained module of a module dir, built on its spaces and model_config (the
    class it names is imported unless ``module_class`` is given), in eval mode."""
    from rlmesh.env.registry import space_from_data
    from rlmesh.runtime.import_path import import_object

    spec = read_module_spec(path)
    cls = module_class or import_object(spec["module_class"], "module_class")
    module = cls(observation_space=space_from_data(spec["observation_space"]),
                 action_space=space_from_data(spec["action_space"]),
                 model_config=dict(spec.get("model_config") or {}), inference_only=False)
    module.set_state(read_module_state(path))
    if hasattr(module, "eval"):
        module.eval()
    return module
