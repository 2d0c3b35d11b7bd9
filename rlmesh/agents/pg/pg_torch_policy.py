"""RLlib's ray.rllib.agents.pg.pg_torch_policy: PG's torch policy (today
rlmesh.algorithms.pg.PGTorchPolicy)."""

from rlmesh.algorithms.pg import PGTorchPolicy

__all__ = ["PGTorchPolicy"]
