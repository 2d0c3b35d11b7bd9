"""RLlib's ``ray.rllib.core.columns``: ``Columns``, the batch keys (rlmesh/rl/columns.py),
the new stack's module keys (``STATE_IN``, ``EMBEDDINGS``, ...) among them."""

from rlmesh.rl.columns import Columns

__all__ = ["Columns"]
