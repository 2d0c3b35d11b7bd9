"""The placement scheduler: strategies, fractions, custom resources, errors, node deaths,
and properties checked by hypothesis against a brute force on small clusters."""

from __future__ import annotations

import copy
import itertools
from typing import Mapping

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlmesh.placement.scheduler import (Node, Placement, PlacementError, place, replace)
from rlmesh.runtime.resources import STRATEGIES, Bundle, PlacementGroup


def cluster(**nodes: Mapping[str, float]) -> list[Node]:
    return [Node(name, res) for name, res in nodes.items()]


def group(strategy: str, *bundles: Mapping[str, float], name: str = "") -> PlacementGroup:
    return PlacementGroup(tuple(Bundle(b) for b in bundles), strategy, name)


THREE = cluster(head={"CPU": 4, "GPU": 1}, w1={"CPU": 8}, w2={"CPU": 8})


# --- the request types ----------------------------------------------------------------------

@pytest.mark.parametrize("resources, words", [
    ({"CPU": -1}, "CPU must be a finite number >= 0"),
    ({"GPU": "1"}, "GPU must be a number"),
    ({"GPU": True}, "GPU must be a number"),
    ({"CPU": float("nan")}, "finite"),
    ({"": 1}, "non-empty string"),
    ([("CPU", 1)], "mapping of name to amount"),
])
def test_bundle_rejects_bad_amounts_with_a_clear_message(resources, words):
    with pytest.raises(ValueError, match=words):
        Bundle(resources, "learner")


def test_requests_cross_a_socket_as_plain_data():
    pg = PlacementGroup((Bundle({"CPU": 1, "GPU": 0.5}, "learner"), Bundle({"CPU": 1})),
                        "STRICT_SPREAD", "impala")
    wire = msgpack.unpackb(msgpack.packb(pg.to_data()))
    assert PlacementGroup.from_data(wire) == pg
    assert hash(PlacementGroup.from_data(wire)) == hash(pg)
    assert PlacementGroup.from_data({"bundles": [{"resources": {"CPU": 2}}]}).strategy == "PACK"


def test_request_data_errors_name_the_mistake():
    with pytest.raises(ValueError, match="unknown key 'strategie'.*did you mean 'strategy'"):
        PlacementGroup.from_data({"bundles": [], "strategie": "PACK"})
    with pytest.raises(ValueError, match="did you mean 'STRICT_SPREAD'"):
        PlacementGroup([{"CPU": 1}], "strict_spread")
    with pytest.raises(ValueError, match="at least one bundle"):
        PlacementGroup(())
    with pytest.raises(ValueError, match="missing resources"):
        Bundle.from_data({"label": "x"})


def test_bundles_may_be_given_as_mappings_and_are_immutable():
    pg = PlacementGroup([{"CPU": 1}], "SPREAD")
    assert pg.bundles == (Bundle({"CPU": 1.0}),)
    with pytest.raises(TypeError):
        pg.bundles[0].resources["CPU"] = 2  # type: ignore[index]


def test_node_names_must_be_unique():
    with pytest.raises(ValueError, match="unique: w1"):
        place([group("PACK", {"CPU": 1})], [Node("w1", {"CPU": 1}), Node("w1", {"CPU": 2})])


# --- each strategy ----------------------------------------------------------------------------

def test_strict_pack_puts_the_group_on_the_tightest_node_that_holds_it_all():
    nodes = cluster(big={"CPU": 16}, small={"CPU": 4}, tiny={"CPU": 2})
    p = place([group("STRICT_PACK", {"CPU": 2}, {"CPU": 1}, {"CPU": 1})], nodes)
    assert p.group(0) == ("small",) * 3
    assert p.free["small"] == {"CPU": 0.0} and p.used["small"] == {"CPU": 4.0}


def test_strict_pack_fails_rather_than_split():
    with pytest.raises(PlacementError) as err:
        place([group("STRICT_PACK", {"CPU": 6}, {"CPU": 6}, name="big")], THREE)
    assert str(err.value) == ("group 'big' (STRICT_PACK, 2 bundles on one node): needs CPU 12 "
                              "together, the most free on any node is 8, on w2 "
                              "(nodes: head, w1, w2)")
    assert (err.value.resource, err.value.needed, err.value.most_free) == ("CPU", 12, 8)


def test_pack_prefers_one_node_and_spills_over_to_few():
    assert len(set(place([group("PACK", {"CPU": 3}, {"CPU": 3})], THREE).group(0))) == 1
    spilled = place([group("PACK", *[{"CPU": 3}] * 5)], THREE).group(0)
    assert len(set(spilled)) == 3  # 4 + 8 + 8 CPUs hold 1 + 2 + 2 of them: no fewer nodes do
    assert sorted(spilled).count("w1") == 2 and sorted(spilled).count("w2") == 2


def test_pack_finds_a_fit_first_fit_decreasing_misses():
    # First fit decreasing puts 5+4 on one node, 4+3+2 on the other, and has no room for the
    # last 2; the fallback search finds 5+3+2 and 4+4+2.
    nodes = cluster(a={"CPU": 10}, b={"CPU": 10})
    for strategy in ("PACK", "SPREAD"):
        p = place([group(strategy, *({"CPU": c} for c in (5, 4, 4, 3, 2, 2)))], nodes)
        assert p.free == {"a": {"CPU": 0}, "b": {"CPU": 0}}


def test_pack_fails_when_the_cluster_is_short():
    with pytest.raises(PlacementError, match=r"its 7 bundles need CPU 21 in all, and 20 is free"):
        place([group("PACK", *[{"CPU": 3}] * 7)], THREE)


def test_spread_uses_distinct_nodes_then_reuses_them_evenly():
    nodes = cluster(a={"CPU": 8}, b={"CPU": 8}, c={"CPU": 8})
    assert sorted(place([group("SPREAD", *[{"CPU": 1}] * 3)], nodes).group(0)) == ["a", "b", "c"]
    six = place([group("SPREAD", *[{"CPU": 1}] * 6)], nodes).group(0)
    assert sorted(six.count(n) for n in "abc") == [2, 2, 2]


def test_strict_spread_needs_a_node_per_bundle():
    nodes = cluster(a={"CPU": 8}, b={"CPU": 8})
    assert sorted(place([group("STRICT_SPREAD", {"CPU": 1}, {"CPU": 1})], nodes).group(0)) == \
        ["a", "b"]
    with pytest.raises(PlacementError, match="its 3 bundles need a node each, and only 2 nodes "
                                             r"have room for any of them \(a, b\)"):
        place([group("STRICT_SPREAD", *[{"CPU": 1}] * 3, name="x")], nodes)


def test_strict_spread_finds_a_fit_the_greedy_pass_misses():
    # Largest first, the CPU 2 bundle takes the roomiest node, the only one with "ssd".
    nodes = cluster(n0={"CPU": 4, "ssd": 1}, n1={"CPU": 2})
    p = place([group("STRICT_SPREAD", {"CPU": 2}, {"CPU": 1, "ssd": 0.1})], nodes)
    assert p.group(0) == ("n1", "n0")


def test_fractional_gpus_share_a_gpu_without_float_drift():
    nodes = cluster(g={"CPU": 16, "GPU": 1})
    assert place([group("PACK", *[{"GPU": 0.1}] * 10)], nodes).free["g"]["GPU"] == 0
    assert place([group("STRICT_PACK", *[{"GPU": 1 / 3}] * 3)], nodes).group(0) == ("g",) * 3
    with pytest.raises(PlacementError, match="GPU 1.1 in all, and 1 is free"):
        place([group("PACK", *[{"GPU": 0.1}] * 11)], nodes)
    two = place([group("PACK", {"GPU": 0.5}, name="a"), group("PACK", {"GPU": 0.5}, name="b")],
                nodes)
    assert two.free["g"] == {"CPU": 16.0, "GPU": 0.0}


def test_custom_resources_steer_bundles_to_the_nodes_that_offer_them():
    nodes = cluster(head={"CPU": 8, "node:head": 1}, w1={"CPU": 8, "ssd": 2}, w2={"CPU": 8})
    p = place([group("PACK", {"CPU": 1, "node:head": 0.01}),
               group("SPREAD", {"CPU": 1, "ssd": 1}, {"CPU": 1, "ssd": 1})], nodes)
    assert p.group(0) == ("head",) and p.group(1) == ("w1", "w1")
    with pytest.raises(PlacementError, match="needs tpu 1, the most free on any node is 0"):
        place([group("PACK", {"tpu": 1})], nodes)


def test_cpu_only_bundles_keep_off_gpu_nodes_while_others_have_room():
    nodes = cluster(gpu={"CPU": 32, "GPU": 4}, cpu={"CPU": 8})
    p = place([group("PACK", {"CPU": 4}), group("PACK", {"CPU": 4}), group("PACK", {"CPU": 4})],
              nodes)
    assert [p.group(g)[0] for g in range(3)] == ["cpu", "cpu", "gpu"]


def test_the_impala_shape():
    learner = group("PACK", {"CPU": 1, "GPU": 1}, {"CPU": 1}, {"CPU": 1}, name="impala")
    runners = group("SPREAD", *[{"CPU": 1}] * 2, name="env_runners")
    nodes = cluster(w1={"CPU": 8}, head={"CPU": 8, "GPU": 1}, w2={"CPU": 8})
    p = place([learner, runners], nodes)
    assert p.group(0) == ("head", "head", "head")
    assert sorted(p.group(1)) == ["w1", "w2"]
    assert p.free == {"w1": {"CPU": 7}, "head": {"CPU": 5, "GPU": 0}, "w2": {"CPU": 7}}


# --- errors and all-or-nothing ----------------------------------------------------------------

def test_the_error_names_group_bundle_resource_and_amounts():
    nodes = cluster(head={"CPU": 8}, w1={"CPU": 8}, w2={"CPU": 8})
    impala = PlacementGroup((Bundle({"CPU": 1, "GPU": 1}, "learner"), Bundle({"CPU": 1})),
                            name="impala")
    with pytest.raises(PlacementError) as err:
        place([impala], nodes)
    assert str(err.value) == ("group 'impala' bundle 0 (learner): needs GPU 1, the most free on "
                              "any node is 0 (nodes: head, w1, w2)")
    e = err.value
    assert (e.group_index, e.group_name, e.bundle_index, e.bundle_label) == \
        (0, "impala", 0, "learner")
    assert (e.resource, e.needed, e.most_free) == ("GPU", 1, 0)


def test_a_bundle_that_needs_everything_at_once_says_so():
    with pytest.raises(PlacementError, match=r"group 1 bundle 0: needs CPU 5, GPU 1 on one node, "
                                             r"and no node has all of it free at once \(most "
                                             r"free: CPU 8 on w2, GPU 1 on head"):
        place([group("PACK", {"CPU": 1}), group("PACK", {"CPU": 5, "GPU": 1})], THREE)


def test_a_failed_group_reserves_nothing_and_place_returns_nothing():
    used = {"head": {"CPU": 1}, "w1": {"CPU": 2}}
    before = copy.deepcopy(used)
    groups = [group("PACK", {"CPU": 1}), group("PACK", {"GPU": 1}, {"GPU": 1}, name="two")]
    with pytest.raises(PlacementError) as err:
        place(groups, THREE, used)
    assert used == before
    # bundle 0 of "two" took the only GPU before bundle 1 failed; the error sees it free again
    assert "GPU 2 in all, and 1 is free on the whole cluster" in str(err.value)
    assert err.value.group_index == 1


def test_used_is_respected_and_checked():
    with pytest.raises(PlacementError, match="needs GPU 1, the most free on any node is 0.5, "
                                             "on head"):
        place([group("PACK", {"GPU": 1})], THREE, {"head": {"GPU": 0.5}})
    p = place([group("PACK", {"CPU": 8})], THREE, {"w2": {"CPU": 1}})
    assert p.group(0) == ("w1",) and p.used["w2"] == {"CPU": 1} and p.baseline["w2"] == {"CPU": 1}
    with pytest.raises(ValueError, match="not among the nodes"):
        place([], THREE, {"w9": {"CPU": 1}})
    with pytest.raises(ValueError, match="CPU 9 is more than the 8 it has"):
        place([], THREE, {"w1": {"CPU": 9}})


# --- a node dies ------------------------------------------------------------------------------

def test_replace_moves_only_the_dead_nodes_bundles():
    nodes = cluster(head={"CPU": 8, "GPU": 1}, w1={"CPU": 8}, w2={"CPU": 8}, w3={"CPU": 8})
    groups = [group("PACK", {"CPU": 1, "GPU": 1}, {"CPU": 1}, name="impala"),
              group("SPREAD", *[{"CPU": 1}] * 3, name="runners"),
              group("STRICT_SPREAD", {"CPU": 2}, {"CPU": 2}, name="aggregators")]
    p = place(groups, nodes)
    dead = p[(1, 0)]
    after = replace(p, dead, groups, nodes)
    assert dead not in after.assignment.values()
    for key, node in p.assignment.items():
        if node != dead:
            assert after[key] == node
    assert len(set(after.group(2))) == 2  # STRICT_SPREAD still on distinct nodes
    assert dead not in after.used
    assert sum(u["CPU"] for u in after.used.values()) == 2 + 3 + 4


def test_replace_moves_a_strict_pack_group_whole_or_names_it():
    nodes = cluster(a={"CPU": 4}, b={"CPU": 4}, c={"CPU": 2})
    groups = [group("STRICT_PACK", {"CPU": 2}, {"CPU": 2}, name="learners")]
    p = place(groups, nodes)
    assert p.group(0) in (("a", "a"), ("b", "b"))
    survivor = "b" if p.group(0)[0] == "a" else "a"
    assert replace(p, p.group(0)[0], groups, nodes).group(0) == (survivor, survivor)
    with pytest.raises(PlacementError, match=r"after nodes a, b died, group 'learners' \(STRICT_"
                                             r"PACK, 2 bundles on one node\): needs CPU 4"):
        replace(p, ["a", "b"], groups, nodes)


def test_replace_checks_its_inputs():
    groups = [group("PACK", {"CPU": 1})]
    p = place(groups, THREE)
    with pytest.raises(ValueError, match="not made for these groups"):
        replace(p, "w1", groups * 2, THREE)
    with pytest.raises(ValueError, match="neither among the nodes nor dead"):
        replace(p, "nobody", groups, [n for n in THREE if n.name != p[(0, 0)]])


def test_ten_thousand_bundles_on_a_thousand_nodes():
    # the benchmark's size (bench_scheduler times it); here: all placed, nothing over-committed
    gpu, cpu = {"CPU": 64, "GPU": 8, "memory": 512}, {"CPU": 32, "memory": 256}
    nodes = [Node(f"n{i}", gpu if i % 4 == 0 else cpu) for i in range(1000)]
    shapes = [{"CPU": 1, "memory": 4}, {"CPU": 2, "GPU": 0.5, "memory": 16}, {"CPU": 0.5}]
    groups = [group(STRATEGIES[g % 4], *[shapes[(g + b) % 3] for b in range(1 + g % 8)])
              for g in range(2250)]
    assert sum(len(g.bundles) for g in groups) >= 10_000
    check_placement(place(groups, nodes), groups, nodes, {})


# --- properties, on clusters small enough to brute-force --------------------------------------

QUARTERS = [0.25, 0.5, 1.0, 1.5, 2.0, 3.0]
node_resources = st.fixed_dictionaries(
    {"CPU": st.sampled_from([0.0, 2.0, 4.0, 8.0])},
    optional={"GPU": st.sampled_from([0.5, 1.0, 2.0]), "ssd": st.sampled_from([1.0, 2.0])})
# mostly CPU, sometimes a GPU share or a custom resource; every amount a quarter
bundle_resources = st.sampled_from(
    [{"CPU": q} for q in QUARTERS] + [{"CPU": 1.0, "GPU": g} for g in (0.25, 0.5, 1.0)]
    + [{"GPU": 0.5}, {"CPU": 0.5, "ssd": 0.5}, {"ssd": 1.0}, {}])
groups_st = st.lists(st.builds(
    PlacementGroup, st.lists(bundle_resources.map(Bundle), min_size=1, max_size=4).map(tuple),
    st.sampled_from(STRATEGIES)), min_size=1, max_size=4)
nodes_st = st.lists(node_resources, min_size=1, max_size=5).map(
    lambda rs: [Node(f"n{i}", r) for i, r in enumerate(rs)])


@st.composite
def used_st(draw: st.DrawFn, nodes: list[Node]) -> dict[str, dict[str, float]]:
    used = {}
    for node in nodes:
        if draw(st.booleans()):
            used[node.name] = {r: draw(st.sampled_from([0.0, v / 2, v]))
                               for r, v in node.resources.items()}
    return used


def fits_brute_force(group: PlacementGroup, free: Mapping[str, Mapping[str, float]]) -> bool:
    """Whether any assignment of the group's bundles to nodes fits (amounts are quarters:
    float sums of them are exact)."""
    names, n = list(free), len(group.bundles)
    for choice in itertools.product(range(len(names)), repeat=n):
        if group.strategy == "STRICT_PACK" and len(set(choice)) > 1:
            continue
        if group.strategy == "STRICT_SPREAD" and len(set(choice)) < n:
            continue
        left = [dict(free[name]) for name in names]
        for bundle, i in zip(group.bundles, choice):
            for r, v in bundle.resources.items():
                left[i][r] = left[i].get(r, 0.0) - v
        if all(v >= 0 for node in left for v in node.values()):
            return True
    return False


def check_placement(p: Placement, groups: list[PlacementGroup], nodes: list[Node],
                    used: Mapping[str, Mapping[str, float]]) -> None:
    assert set(p.assignment) == {(g, b) for g, grp in enumerate(groups)
                                 for b in range(len(grp.bundles))}
    load = {n.name: dict(used.get(n.name, {})) for n in nodes}
    for (g, b), name in p.assignment.items():
        for r, v in groups[g].bundles[b].resources.items():
            load[name][r] = load[name].get(r, 0.0) + v
    for node in nodes:
        for r, v in load[node.name].items():
            assert v <= node.resources.get(r, 0.0), f"{node.name} over-committed on {r}"
            assert p.used[node.name].get(r, 0.0) == v
        for r, cap in node.resources.items():
            assert p.free[node.name][r] == cap - load[node.name].get(r, 0.0)
    for g, grp in enumerate(groups):
        on = p.group(g)
        if grp.strategy == "STRICT_PACK":
            assert len(set(on)) == 1
        if grp.strategy == "STRICT_SPREAD":
            assert len(set(on)) == len(on)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), groups_st, nodes_st)
def test_place_is_sound_and_refuses_only_what_cannot_fit(data, groups, nodes):
    used = data.draw(used_st(nodes))
    before = copy.deepcopy(used)
    try:
        p = place(groups, nodes, used)
    except PlacementError as e:
        assert used == before
        k = e.group_index
        prefix = place(groups[:k], nodes, used)  # the groups before it fit, as placed
        # Greedy first, then an exact search (matching for STRICT_SPREAD, a bounded depth-first
        # search for PACK/SPREAD that covers these small cases): a refusal is real.
        assert not fits_brute_force(groups[k], prefix.free), (groups[k], prefix.free)
        return
    assert used == before
    check_placement(p, groups, nodes, used)
    assert place(groups, nodes, used) == p  # deterministic
    for g, grp in enumerate(groups):  # PACK puts the group on one node when one can hold it
        if grp.strategy == "PACK":
            free = place(groups[:g], nodes, used).free
            if fits_brute_force(PlacementGroup(grp.bundles, "STRICT_PACK"), free):
                assert len(set(p.group(g))) == 1


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), groups_st, nodes_st)
def test_replace_keeps_the_living_and_respects_every_constraint(data, groups, nodes):
    try:
        p = place(groups, nodes)
    except PlacementError:
        return
    dead = data.draw(st.sampled_from([n.name for n in nodes]))
    live = [n for n in nodes if n.name != dead]
    try:
        after = replace(p, dead, groups, nodes)
    except PlacementError as e:
        assert e.group_index in {g for (g, _), name in p.assignment.items() if name == dead}
        return
    check_placement(after, groups, live, {})
    hit = {g for (g, _), name in p.assignment.items() if name == dead}
    for (g, b), name in p.assignment.items():
        if name != dead and not (g in hit and groups[g].strategy == "STRICT_PACK"):
            assert after[(g, b)] == name


def test_impala_resource_request_places_the_learner_side_on_the_gpu_node():
    from rlmesh.algorithms.impala_config import ImpalaConfig

    config = (ImpalaConfig().env_runners(num_env_runners=4)
              .learners(num_learners=1, num_gpus_per_learner=1, num_aggregation_workers=2))
    groups = config.resource_request()
    driver, learner = groups[0].bundles
    assert driver.resources["CPU"] == 3  # the driver and its two aggregators
    assert learner.resources == {"CPU": 0, "GPU": 1}  # 'auto' CPUs: none beside a GPU
    assert [b.resources["CPU"] for b in groups[1].bundles] == [1, 1, 1, 1]
    nodes = [Node("head", {"CPU": 4, "GPU": 1}), Node("w1", {"CPU": 2}), Node("w2", {"CPU": 2})]
    placement = place(groups, nodes)
    assert set(placement.group(0)) == {"head"}
    assert placement.used["head"]["GPU"] == 1
    # runners spread over every node with room, the GPU node's last CPU included
    assert sorted(placement.group(1)) == ["head", "w1", "w2", "w2"] or \
        sorted(placement.group(1)) == ["head", "w1", "w1", "w2"]
    assert all(placement.free[n]["CPU"] >= 0 for n in ("head", "w1", "w2"))
    short = [Node("head", {"CPU": 4}), Node("w1", {"CPU": 2})]
    with pytest.raises(PlacementError, match="learner-0.*GPU"):
        place(groups, short)
