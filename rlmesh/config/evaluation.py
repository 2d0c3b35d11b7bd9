"""The evaluation group (RLlib's ``.evaluation()``): evaluation runners, how often and how long
they run, and the config overrides they act with.
Mixed into AlgorithmConfig; each setting is declared here once, as in base.py."""

from __future__ import annotations

from dataclasses import dataclass

from rlmesh.config.settings import setting  # noqa: F401  (used by the settings below)


@dataclass(kw_only=True)
class EvaluationSettings:
    def evaluation(self, **kwargs):
        """Set the evaluation group (see ``fields_table("evaluation")``)."""
        return self._set("evaluation", kwargs)
