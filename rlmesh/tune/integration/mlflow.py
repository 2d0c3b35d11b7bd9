"""``MLflowLoggerCallback(tracking_uri=..., experiment_name=..., tags={...},
save_artifact=False)``: RLlib's name for MLflow tracking."""

from __future__ import annotations

from rlmesh.tune.integration import TrackerCallback


class MLflowLoggerCallback(TrackerCallback):
    """One MLflow run per trial in the experiment (docs/tracking.md)."""

    tracker = "mlflow"
