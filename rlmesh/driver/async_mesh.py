"""The meshes of asynchronous runs: ``AsyncMesh`` (IMPALA, APPO: runners stream to aggregators
or learners, which train on their own) and ``ApexMesh`` (APEX: runners stream to replay
shards, which the learners sample). Their processes are the ASYNC and APEX declarations of
``topologies.py``; what the driver asks of them is in the pools (``mesh.py``)."""

from __future__ import annotations

from rlmesh.driver.mesh import Mesh
from rlmesh.driver.topologies import APEX, ASYNC


class AsyncMesh(Mesh):
    """A learner that dies ends the run (``learner_failure``): its optimizer state exists
    nowhere else; a runner or aggregator that dies is restarted and its streams opened anew."""

    topology = ASYNC
    asynchronous = True


class ApexMesh(Mesh):
    """A shard that dies is restarted empty, its runners start new streams into it and the
    learners are told. With one shard, it is served from the driver's process
    (``local_single_shard``): ``local_shard`` is its ``ShardBuffer``."""

    topology = APEX
    asynchronous = True
