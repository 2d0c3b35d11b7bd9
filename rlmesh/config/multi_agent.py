"""The multi_agent group (RLlib's ``.multi_agent()``): the policies, which agent each acts
for, and which of them train.
Mixed into AlgorithmConfig; each setting is declared here once, as in base.py."""

from __future__ import annotations

from dataclasses import dataclass

from rlmesh.config.settings import setting  # noqa: F401  (used by the settings below)


@dataclass(kw_only=True)
class MultiAgentSettings:
    def multi_agent(self, **kwargs):
        """Set the multi_agent group (see ``fields_table("multi_agent")``)."""
        return self._set("multi_agent", kwargs)
