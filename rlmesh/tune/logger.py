"""Ray Tune's ``ray.tune.logger.pretty_print``: a training result as the readable,
YAML-style block RLlib scripts print after each ``train()``. (Results are written to files by
rlmesh.results' ResultLogger.)"""

from __future__ import annotations

import json
from typing import Any

# Left out as Tune's printer leaves them out: the whole config and per-episode histograms.
_LEFT_OUT = ("config", "hist_stats")


def _plain(value: Any) -> Any:
    """json's fallback: numpy scalars and arrays as numbers and lists, anything else as text."""
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def pretty_print(result: dict[str, Any]) -> str:
    """``result`` as sorted YAML-style lines (nested dicts indented), without its ``config``
    and ``hist_stats`` and without keys whose value is None."""
    import yaml

    if not isinstance(result, dict):
        raise TypeError(f"pretty_print takes a result dict, got {type(result).__name__}")
    kept = {k: v for k, v in result.items() if k not in _LEFT_OUT and v is not None}
    cleaned = json.loads(json.dumps(kept, default=_plain))
    return yaml.safe_dump(cleaned, default_flow_style=False)
