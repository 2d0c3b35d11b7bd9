"""The mesh's pools (driver/pools.py) see the actors the wiring built for their role kind, and
the driver tells a learner by the kind recorded at spawn, not by its name: a declaration
built on a job that spawns nothing (no process)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from rlmesh.algorithms.ppo import PPOConfig
from rlmesh.driver.learner_failure import LearnerFailed, learner_calls
from rlmesh.driver.mesh import Mesh
from rlmesh.driver.topology import Role, Topology
from rlmesh.runtime import RemoteError


class NoProcesses:
    """A job whose actors are only their names."""

    async def spawn(self, cls_path: str, name: str, **kwargs: Any) -> Any:
        return SimpleNamespace(name=name)


def no_args(mesh: Any, index: int) -> dict[str, Any]:
    return {}


TOY = Topology("toy", roles=(
    Role("learner", "toy:Learner", count=lambda m: 2, spec=no_args, phase="toy", name="trainer"),
    Role("runner", "toy:Runner", count=lambda m: 2, spec=no_args, phase="toy",
         name="env_runner", first_index=1),
))


@pytest.fixture
def mesh() -> Any:
    mesh = Mesh(PPOConfig().learners(num_learners=2), {}, topology=TOY)
    mesh.job = NoProcesses()
    try:
        mesh.build("toy")
        mesh.job = None  # nothing to shut down
        yield mesh
    finally:
        mesh.stop()


def test_each_pool_is_its_kinds_actors(mesh: Mesh) -> None:
    assert [h.name for h in mesh.learners] == ["trainer-0", "trainer-1"]
    assert (len(mesh.runners), mesh.runners[1].name) == (2, "env_runner-2")
    assert mesh.runners.names() == ["env_runner-1", "env_runner-2"]
    assert list(mesh.eval_runners) == [] and mesh.handle("inference") is None
    assert mesh.runners.restarts == 0


def test_a_learner_is_known_by_its_kind_not_its_name(mesh: Mesh) -> None:
    assert (mesh.kind_of("trainer-1"), mesh.kind_of("learner-0")) == ("learner", None)
    algo = SimpleNamespace(mesh=mesh, config=mesh.config, last_checkpoint=None)
    with pytest.raises(LearnerFailed, match="ValueError in trainer-0: boom"):
        with learner_calls(algo):
            raise RemoteError("ValueError", "boom", actor="trainer-0")
    # Named like a learner, spawned as none: its error is not a learner's failure.
    with pytest.raises(RemoteError):
        with learner_calls(algo):
            raise RemoteError("ValueError", "boom", actor="learner-0")
