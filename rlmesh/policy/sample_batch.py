"""RLlib's ``SampleBatch`` at its module path, with RLlib's column constants: rlmesh's
``SampleBatch`` (``rl/columns.py``: flat samples as a dict) under the names an RLlib policy
reads. ``DONES`` and ``NEXT_OBS`` ("new_obs", per step) are derived from rlmesh's columns when
asked for: ``terminateds | truncateds``, and a trajectory's ``obs`` shifted by one with its
``next_obs`` last (``postprocess_fn`` sees both; the joined train batch keeps ``dones`` only)."""

from __future__ import annotations

from rlmesh.rl.columns import Columns, MissingColumn
from rlmesh.rl.columns import SampleBatch as _SampleBatch


class SampleBatch(_SampleBatch):
    """rlmesh's SampleBatch with RLlib's constants. Every batch rlmesh hands a policy is an
    ``rlmesh.rl.columns.SampleBatch``, whose class this is a subclass of: test with
    ``isinstance(batch, dict)`` or the base class."""

    CUR_OBS = Columns.OBS
    NEXT_OBS = NEW_OBS = "new_obs"  # RLlib's per-step next observation (derived)
    DONES = "dones"  # terminateds | truncateds (derived)
    PREV_ACTIONS, PREV_REWARDS = Columns.PREV_ACTIONS, Columns.PREV_REWARDS
    AGENT_INDEX = Columns.AGENT_INDEX
    SEQ_LENS = "seq_lens"


__all__ = ["MissingColumn", "SampleBatch"]
