"""The streaming group: what an algorithm whose runners stream fragments and whose learner
broadcasts weights reads (IMPALA, APPO, APEX, APEX_DDPG). Mixed into those configs; each
setting is declared here once. An algorithm with another default names it in its config's
``defaults={...}`` (the doc stays here)."""

from __future__ import annotations

from dataclasses import dataclass

from rlmesh.config.settings import setting


@dataclass(kw_only=True)
class StreamingSettings:
    max_sample_requests_in_flight_per_worker: int = setting(
        2, "env_runners", ge=1, aliases=("max_requests_in_flight_per_env_runner",),
        doc="Fragments a runner may have streamed (to its aggregator, learner or replay "
            "shard) and not yet seen taken in; it samples on until this many are in flight, "
            "then waits.")
    broadcast_interval: int = setting(
        1, "training", ge=1,
        doc="Learner updates between two weight broadcasts to the runners (through the "
            "param server).")
