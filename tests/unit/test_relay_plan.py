"""Where the weight relays and per-node aggregators go (issue 50), read off a placed job: one
relay per node with runners (``auto``: nodes with two or more, under a launched cluster), a
tree of degree ``weights_relay_fanout`` above them, each runner's spec naming its relay with
the param server to fall back on, and each runner streaming to an aggregator on its own node."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rlmesh.algorithms.impala_config import ImpalaConfig
from rlmesh.driver.async_mesh import AsyncMesh
from rlmesh.driver.topologies import aggregator_count, aggregator_node


def placed_mesh(runners_on: dict[str, int], **settings) -> AsyncMesh:
    """A mesh of an IMPALA config whose job placed ``runners_on[node]`` runners on each node
    ("" : this machine), as the cluster's scheduler does, before anything is built."""
    n = sum(runners_on.values())
    config = ImpalaConfig().environment("CartPole-v1").env_runners(num_env_runners=n)
    config = config.update_from_dict(settings) if settings else config
    mesh = AsyncMesh(config, {"default_policy": {}})
    placement, i = {}, 1
    for node, count in runners_on.items():
        for _ in range(count):
            if node:
                placement[f"env_runner-{i}"] = node
            i += 1
    nodes = {node: object() for node in runners_on if node}
    mesh.job = SimpleNamespace(placement=placement, nodes=nodes)
    return mesh


@pytest.fixture
def meshes():
    made = []

    def make(*args, **kwargs):
        made.append(placed_mesh(*args, **kwargs))
        return made[-1]

    yield make
    for mesh in made:
        mesh.loop_thread.close()


def test_one_relay_per_node_and_each_runner_names_its_own(meshes):
    mesh = meshes({"a": 4, "b": 4, "c": 4})
    plan = mesh.relay_plan()
    assert [(node, len(runners), up) for node, runners, up in plan] == [
        ("a", 4, "param_server"), ("b", 4, "param_server"), ("c", 4, "param_server")]
    spec = mesh.runner_spec("runner", 6)  # on node b
    assert (spec.param_server, spec.weights_fallback) == ("weight_relay-1", "param_server")


def test_relays_beyond_the_fanout_are_fed_by_relays(meshes):
    mesh = meshes({f"n{k}": 2 for k in range(7)}, weights_relay_fanout=2)
    ups = [up for _, _, up in mesh.relay_plan()]
    # Two fed by the param server, every relay feeding at most two more.
    assert ups == ["param_server", "param_server", "weight_relay-0", "weight_relay-0",
                   "weight_relay-1", "weight_relay-1", "weight_relay-2"]
    fed = {up: ups.count(up) for up in ups}
    assert max(fed.values()) == 2


def test_auto_leaves_out_a_lone_runner_and_one_machine(meshes):
    mesh = meshes({"a": 3, "b": 1})
    assert [node for node, _, _ in mesh.relay_plan()] == ["a"]
    lone = mesh.runner_spec("runner", 4)  # node b: the param server itself, no fallback
    assert (lone.param_server, lone.weights_fallback) == ("param_server", None)
    assert meshes({"": 8}).relay_plan() == []  # one machine: nothing to save
    local = meshes({"": 8}, weights_relay=True).relay_plan()
    assert [(node, len(runners)) for node, runners, _ in local] == [("", 8)]
    assert meshes({"a": 4, "b": 4}, weights_relay=False).relay_plan() == []


def test_aggregators_per_node_sit_with_their_runners_and_take_only_theirs(meshes):
    mesh = meshes({"a": 3, "b": 2}, aggregators_per_node=1)
    assert aggregator_count(mesh) == 2
    assert [aggregator_node(mesh, j) for j in range(2)] == ["a", "b"]
    stream = next(s for s in mesh.topology.streams if s.dst == "aggregator")
    mesh._actors = {"runner": [SimpleNamespace(name=f"env_runner-{i}") for i in range(1, 6)],
                    "aggregator": [SimpleNamespace(name=f"aggregator-{j}") for j in range(2)]}
    mesh.job.placement.update({"aggregator-0": "a", "aggregator-1": "b"})
    assert [mesh._sinks_of(stream, i) for i in range(5)] == [
        ["aggregator-0"]] * 3 + [["aggregator-1"]] * 2
    # Two per node: each node's runners take turns among their own node's two.
    mesh2 = meshes({"a": 4}, aggregators_per_node=2)
    mesh2._actors = {"runner": [SimpleNamespace(name=f"env_runner-{i}") for i in range(1, 5)],
                     "aggregator": [SimpleNamespace(name=f"aggregator-{j}") for j in range(2)]}
    mesh2.job.placement.update({"aggregator-0": "a", "aggregator-1": "a"})
    assert [mesh2._sinks_of(stream, i)[0][-1] for i in range(4)] == ["0", "1", "0", "1"]
    # Without aggregators_per_node: num_aggregation_workers, runner i to aggregator i mod J.
    plain = meshes({"a": 4}, num_aggregation_workers=2)
    assert aggregator_count(plain) == 2 and aggregator_node(plain, 1) is None


def test_a_topology_without_relays_gets_none_under_any_setting(meshes):
    from rlmesh.driver.es_mesh import ESMesh

    mesh = meshes({"a": 4, "b": 4}, weights_relay=True)
    es = ESMesh(mesh.config, {"default_policy": {}})
    try:
        es.job = mesh.job
        assert es.relay_plan() == []
        assert es.runner_spec("runner", 1).param_server == "param_server"
    finally:
        es.loop_thread.close()
