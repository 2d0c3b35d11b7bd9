"""The run's wiring as data (driver/topology.py, topologies.py): every call a declaration
names is served by the role it is sent to, specs survive the wire, and docs/architecture.md
shows the shipped declarations as ``render`` draws them."""

from __future__ import annotations

import re
from pathlib import Path

import msgpack
import pytest

from rlmesh.driver.topologies import SHIPPED
from rlmesh.driver.topology import Role, render
from rlmesh.runtime.import_path import import_object
from rlmesh.roles.specs import AggregatorSpec, RunnerSpec, ShardSpec, runner_spec

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def _serves(topology, kind: str, call: str) -> bool:
    """Whether the kind's first declaration (its default class) serves ``call``."""
    protocol = import_object(topology.role(kind).cls_path, "role").protocol
    return call in protocol.calls + protocol.tells


@pytest.mark.parametrize("topology", SHIPPED, ids=lambda t: t.name)
def test_every_call_a_declaration_names_is_served_by_its_role(topology):
    for role in topology.roles:
        if role.ready_call:
            assert _serves(topology, role.kind, role.ready_call), (role.kind, role.ready_call)
    for s in topology.streams:
        if s.via.startswith("pull:"):
            assert _serves(topology, s.dst, s.via[5:])
            assert s.on_src_restart is None or _serves(topology, s.dst, s.on_src_restart)
        elif s.via != "spec":
            assert _serves(topology, s.src, s.via) and _serves(topology, s.src, "reset_streams")
            sink = import_object(topology.role(s.dst).cls_path, "role").protocol
            assert "add_fragment" in sink.streams, (s.dst, "takes no fragments")


def test_docs_show_the_shipped_topologies_as_rendered():
    shown = re.findall(r"```mermaid\n(.*?)```", DOC.read_text(), re.S)
    assert [s.strip() for s in shown if s.startswith("%% ")] == [render(t) for t in SHIPPED], (
        "docs/architecture.md's wiring diagrams differ from the declarations: paste "
        "`python -c 'from rlmesh.driver.topologies import *; from rlmesh.driver.topology "
        "import render; print(*map(render, SHIPPED), sep=chr(10))'` there")


def test_specs_cross_the_wire_as_plain_data():
    specs = [RunnerSpec({"env": "CartPole-v1"}, worker_index=3, policy_specs={"p": {}}),
             AggregatorSpec({"lr": 1.0}, "m:C", learners=["learner-0"], index=1),
             ShardSpec({}, obs_space={"type": "Box"}, index=2)]
    for spec in specs:
        data = msgpack.unpackb(msgpack.packb(spec.to_data()))
        assert type(spec).from_data(data) == spec
    with pytest.raises(TypeError, match="unknown fields"):
        RunnerSpec.from_data({"config": {}, "_env_registry": {}})


def test_a_config_dict_with_underscore_extras_becomes_a_spec_with_the_config_as_written():
    spec = runner_spec({"env": "x", "_env_registry": {"x": "m:f"}, "_policy_specs": {"p": {}},
                        "_inference_actor": "inference"})
    assert spec.config == {"env": "x"}
    assert (spec.env_registry, spec.policy_specs, spec.inference_actor) == (
        {"x": "m:f"}, {"p": {}}, "inference")
    assert runner_spec(spec.to_data()) == spec


class _Mesh:
    def __init__(self, **config):
        self.config = type("Cfg", (), config)


def test_placement_indexes_and_names_come_from_the_declaration():
    role = Role("runner", "m:R", count=lambda m: m.config.n, spec=lambda m, i: {},
                placement="driver_if_none", first_index=1, name="env_runner")
    assert role.places(_Mesh(n=0)) == [(0, True)]
    assert role.places(_Mesh(n=2)) == [(1, False), (2, False)]
    assert role.actor_name(2) == "env_runner-2"
    with pytest.raises(ValueError, match="placement"):
        Role("x", "m:X", count=lambda m: 1, spec=lambda m, i: {}, placement="moon")
