"""RLlib's tracker callbacks by their names: ``rlmesh.tune.integration.wandb.WandbLoggerCallback``
and ``rlmesh.tune.integration.mlflow.MLflowLoggerCallback`` (rlmesh/tune/trackers.py logs)."""

from __future__ import annotations

from rlmesh.tune.trackers import normalize


class TrackerCallback:
    """A tracker and its options, checked at once (an unknown option names the closest).
    Hand it to ``rlmesh.tune.run(..., callbacks=[...])`` or ``RunConfig(callbacks=[...])``."""

    tracker = ""

    def __init__(self, **options):
        self.options = normalize({self.tracker: options}, type(self).__name__)[self.tracker]

    def __repr__(self) -> str:
        shown = {k: ("***" if k in ("api_key", "tracking_token") else v)
                 for k, v in self.options.items()}
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in shown.items())})"
