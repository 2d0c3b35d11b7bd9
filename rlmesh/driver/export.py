"""``Algorithm.export_policy_model`` and ``export_policy_checkpoint`` (RLlib's names): one
policy of a run written as a model file that runs without rlmesh, or as a checkpoint of that
policy alone that rlmesh loads back. Docs: docs/export.md."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlmesh.driver import checkpoints
from rlmesh.policy.policy import Policy, PolicyError
from rlmesh.rl.filters import CLIP, MeanStdFilter

if TYPE_CHECKING:
    from rlmesh.driver.run_view import RunView

METADATA_FILE = "metadata.json"  # as rlmesh.policy.export writes it


def export_policy_model(algo: RunView, policy: Policy, export_dir: str | Path, policy_id: str,
                        onnx: int | None) -> str:
    """``policy.export_model`` (TorchScript, or ONNX at opset ``onnx``), with the run's
    observation filter recorded in metadata.json where one changes what the model reads."""
    if type(policy).export_model is Policy.export_model:
        raise PolicyError(
            f"export_policy_model: policy {policy_id!r} ({type(policy).__name__}) has no "
            "torch model for TorchScript or ONNX to hold; save it with "
            "algo.export_policy_checkpoint(dir) instead")
    path = policy.export_model(str(export_dir), onnx)
    obs_filter = getattr(algo, "obs_filter", None)
    if isinstance(obs_filter, MeanStdFilter) and policy_id == "default_policy":
        _record_filter(Path(path).parent / METADATA_FILE, obs_filter)
    return str(path)


def _record_filter(metadata_path: Path, obs_filter: MeanStdFilter) -> None:
    """The run normalises observations before the model sees them (``observation_filter``):
    without the statistics in metadata.json, the exported file would be fed raw ones."""
    meta = json.loads(metadata_path.read_text())
    meta["observation_filter"] = {
        "name": "MeanStdFilter",
        "apply": f"obs = clip((obs - mean) / (std + 1e-8), -{CLIP:g}, {CLIP:g}) before the model",
        "mean": obs_filter.rs.mean.tolist(),
        "std": obs_filter.rs.std.tolist(),
    }
    meta["observation"]["raw"] = ("observations as the env returns them, normalised as "
                                  "observation_filter says; the rest of preprocessing is in the graph")
    tmp = metadata_path.with_name(f".{metadata_path.name}.tmp")
    tmp.write_text(json.dumps(meta, indent=2) + "\n")
    tmp.replace(metadata_path)


def export_policy_checkpoint(algo: RunView, learner_state: dict[str, Any],
                             export_dir: str | Path, policy_id: str) -> str:
    """A checkpoint (the format of ``checkpoints.py``) holding only ``policy_id``: its spec,
    its learner state (weights, optimizer, counters), the run's config and filter. It loads
    with ``InferencePolicy.from_checkpoint(dir)`` (``.policy`` is the Policy), ``rlmesh
    rollout dir`` and ``rlmesh serve``; a single-policy run's also with
    ``Algorithm.from_checkpoint(dir)``."""
    if policy_id not in algo.policy_specs:
        raise KeyError(f"export_policy_checkpoint: no policy {policy_id!r}; this algorithm has "
                       f"{sorted(algo.policy_specs)}")
    state = {"policies": {policy_id: learner_state["policies"][policy_id]},
             "num_updates": learner_state.get("num_updates", 0)}
    return checkpoints.write(Path(export_dir), algo, state, policy_ids=[policy_id])
