"""The offline_data group (RLlib's ``.offline_data()``): where samples are written (``output``)
and read from (``input``).
Mixed into AlgorithmConfig; each setting is declared here once, as in base.py."""

from __future__ import annotations

from dataclasses import dataclass

from rlmesh.config.settings import setting  # noqa: F401  (used by the settings below)


@dataclass(kw_only=True)
class OfflineSettings:
    def offline_data(self, **kwargs):
        """Set the offline_data group (see ``fields_table("offline_data")``)."""
        return self._set("offline_data", kwargs)
