"""Behaviour cloning: MARWIL with ``beta = 0``, so each logged action's log-likelihood is
maximised alike and no value function is trained (nor an advantages column needed)."""

from __future__ import annotations

from rlmesh.algorithms.bc_config import BCConfig
from rlmesh.algorithms.marwil import MARWIL, MARWILTorchPolicy

__all__ = ["BC", "BCConfig"]


class BC(MARWIL):
    """BC from offline data (``input``), as MARWIL with beta 0."""

    config_class = BCConfig
    default_policy_class = MARWILTorchPolicy
