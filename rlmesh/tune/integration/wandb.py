"""``WandbLoggerCallback(project=..., group=..., api_key_file=..., log_config=True,
upload_checkpoints=False, entity=..., ...)``: RLlib's name for W&B tracking."""

from __future__ import annotations

from rlmesh.tune.integration import TrackerCallback


class WandbLoggerCallback(TrackerCallback):
    """One W&B run per trial, grouped by the experiment (docs/tracking.md)."""

    tracker = "wandb"
