"""Where a lease request goes (``scheduling.lease_decision``, ``pick_node``) and the resource
arithmetic behind it (``resources``): pure functions over node views, no processes."""

from __future__ import annotations

import pytest
from ember.resources import NodeResources, apply_strategy, fits, pg_resource_name
from ember.scheduling import (
    MAX_SPILLS,
    RESPILL_AFTER_S,
    NodeView,
    feasible_anywhere,
    lease_decision,
    pick_node,
)

HERE, A, B, GONE = b"here", b"node-a", b"node-b", b"gone"


def node(node_id: bytes, total: dict, available: dict | None = None) -> NodeView:
    return NodeView(node_id, dict(total), dict(total if available is None else available))


def decide(here: NodeView, others: list[NodeView], shape: dict, strategy=None, **kw):
    return lease_decision(here, others, shape, strategy, **kw)


# -- lease_decision -------------------------------------------------------------------------
def test_runs_here_when_it_fits_here() -> None:
    here = node(HERE, {"CPU": 2})
    assert decide(here, [node(A, {"CPU": 8})], {"CPU": 1}) == ("local", None)


def test_spills_to_the_least_loaded_node_with_free_resources() -> None:
    here = node(HERE, {"CPU": 2}, {"CPU": 0})
    busy = node(A, {"CPU": 4}, {"CPU": 1})
    idle = node(B, {"CPU": 4}, {"CPU": 4})
    kind, target = decide(here, [busy, idle], {"CPU": 1})
    assert (kind, target) == ("spill", idle)


def test_waits_here_when_it_fits_later_and_no_node_is_free() -> None:
    here = node(HERE, {"CPU": 2}, {"CPU": 0})
    assert decide(here, [node(A, {"CPU": 2}, {"CPU": 0})], {"CPU": 1}) == ("local", None)


def test_spills_to_a_node_that_could_ever_hold_it() -> None:
    here = node(HERE, {"CPU": 2})
    cpu_only = node(A, {"CPU": 4}, {"CPU": 0})
    gpu_busy = node(B, {"CPU": 4, "GPU": 1}, {"CPU": 0, "GPU": 0})
    assert decide(here, [cpu_only, gpu_busy], {"GPU": 1}) == ("spill", gpu_busy)


def test_a_spilled_request_moves_on_only_to_a_node_with_room_now() -> None:
    busy_here = node(HERE, {"CPU": 2}, {"CPU": 0})
    free = node(A, {"CPU": 4})
    busy = node(B, {"CPU": 4}, {"CPU": 0})
    assert decide(busy_here, [free], {"CPU": 1}) == ("spill", free)
    # Sent here, it starts here when it can, and waits here when no node has room now...
    assert decide(node(HERE, {"CPU": 2}), [free], {"CPU": 1}, spilled=True) == ("local", None)
    assert decide(busy_here, [busy], {"CPU": 1}, spilled=True) == ("local", None)
    # ...but a burst queued on the first node to join moves to one that joined since.
    assert decide(busy_here, [busy, free], {"CPU": 1}, spilled=True) == ("spill", free)
    # Views a heartbeat old can disagree: after MAX_SPILLS moves it stays a while, even so...
    assert decide(busy_here, [busy, free], {"CPU": 1}, spilled=MAX_SPILLS) == ("local", None)
    # ...and moves on once it has waited long enough for views to agree.
    late = {"spilled": MAX_SPILLS + 3, "waited": RESPILL_AFTER_S}
    assert decide(busy_here, [busy, free], {"CPU": 1}, **late) == ("spill", free)
    assert decide(busy_here, [busy], {"CPU": 1}, **late) == ("local", None)
    # A request pinned (softly or not) to another node stays where it was sent.
    for soft in (True, False):
        strategy = ("NODE_AFFINITY", A, soft)
        assert decide(busy_here, [free], {"CPU": 1}, strategy, spilled=True) == ("local", None)


def test_spread_rotates_over_the_nodes_with_room() -> None:
    here, a, b = node(HERE, {"CPU": 2}), node(A, {"CPU": 2}), node(B, {"CPU": 2})
    full = node(b"full", {"CPU": 2}, {"CPU": 0})
    picks = [decide(here, [a, full, b], {"CPU": 1}, "SPREAD", spread=i) for i in range(4)]
    assert picks == [("local", None), ("spill", a), ("spill", b), ("local", None)]


def test_spread_with_no_node_free_waits_here() -> None:
    here = node(HERE, {"CPU": 1}, {"CPU": 0})
    other = node(A, {"CPU": 1}, {"CPU": 0})
    assert decide(here, [other], {"CPU": 1}, "SPREAD", spread=1) == ("local", None)


def test_hard_node_affinity() -> None:
    here = node(HERE, {"CPU": 2}, {"CPU": 0})
    target = node(A, {"CPU": 1}, {"CPU": 0})
    free = node(B, {"CPU": 8})
    # To this node: waits here even with another node free.
    assert decide(here, [free], {"CPU": 1}, ("NODE_AFFINITY", HERE, False)) == ("local", None)
    # To another live node: goes there, busy or not.
    strategy = ("NODE_AFFINITY", A, False)
    assert decide(here, [target, free], {"CPU": 1}, strategy) == ("spill", target)
    # To a node that is gone: unschedulable, naming it.
    kind, message = decide(here, [free], {"CPU": 1}, ("NODE_AFFINITY", GONE, False))
    assert kind == "fail"
    assert GONE.hex() in message and "soft=True" in message


def test_soft_node_affinity_falls_back_to_the_default_placement() -> None:
    here = node(HERE, {"CPU": 2})
    small = node(A, {"CPU": 1})
    free = node(B, {"CPU": 8})
    assert decide(here, [small, free], {"CPU": 1}, ("NODE_AFFINITY", A, True)) == ("spill", small)
    # The target can never hold it, or is gone: placed as if no node were named.
    assert decide(here, [small, free], {"CPU": 4}, ("NODE_AFFINITY", A, True)) == ("spill", free)
    assert decide(here, [free], {"CPU": 1}, ("NODE_AFFINITY", GONE, True)) == ("local", None)


def test_a_demand_no_node_can_hold_is_infeasible() -> None:
    here = node(HERE, {"CPU": 2})
    assert decide(here, [node(A, {"CPU": 4})], {"CPU": 16}) == ("infeasible", None)
    assert decide(here, [], {"GPU": 1}) == ("infeasible", None)


def test_custom_resources_place_like_any_other() -> None:
    here = node(HERE, {"CPU": 2})
    accel = node(A, {"CPU": 2, "accel": 2}, {"CPU": 2, "accel": 1})
    assert decide(here, [accel], {"CPU": 1, "accel": 1}) == ("spill", accel)
    assert decide(here, [accel], {"accel": 3}) == ("infeasible", None)
    # Zero amounts ask for nothing.
    assert decide(here, [accel], {"CPU": 1, "accel": 0}) == ("local", None)


# -- pick_node (the GCS's choice for actors) ------------------------------------------------
def test_pick_node_packs_onto_the_busiest_node_that_fits() -> None:
    a = node(A, {"CPU": 4}, {"CPU": 1})
    b = node(B, {"CPU": 4}, {"CPU": 4})
    assert pick_node([a, b], {"CPU": 1}, None) is a
    assert pick_node([a, b], {"CPU": 2}, None) is b
    assert pick_node([a, b], {"CPU": 8}, None) is None
    assert pick_node([a, b], {"CPU": 1}, None, local_node_id=B) is b


def test_pick_node_spread_prefers_the_least_loaded() -> None:
    a = node(A, {"CPU": 4}, {"CPU": 1})
    b = node(B, {"CPU": 4}, {"CPU": 3})
    assert pick_node([a, b], {"CPU": 1}, "SPREAD") is b


def test_pick_node_affinity() -> None:
    a = node(A, {"CPU": 4}, {"CPU": 0})
    b = node(B, {"CPU": 4})
    assert pick_node([a, b], {"CPU": 1}, ("NODE_AFFINITY", B, False)) is b
    assert pick_node([a, b], {"CPU": 1}, ("NODE_AFFINITY", A, False)) is None
    assert pick_node([a, b], {"CPU": 1}, ("NODE_AFFINITY", A, True)) is b  # the only one free


def test_pick_node_can_require_a_cpu_node() -> None:
    gpu_only = node(A, {"GPU": 1})
    both = node(B, {"CPU": 1, "GPU": 1})
    assert pick_node([gpu_only, both], {"GPU": 1}, None, needs_cpu_node=True) is both
    assert pick_node([gpu_only], {"GPU": 1}, None, needs_cpu_node=True) is None


def test_feasible_anywhere() -> None:
    nodes = [node(A, {"CPU": 2}, {"CPU": 0})]
    assert feasible_anywhere(nodes, {"CPU": 2}, None)  # busy, but it could
    assert not feasible_anywhere(nodes, {"CPU": 3}, None)
    # A placement group may still be being created: its tasks are never ruled out.
    assert feasible_anywhere(nodes, {"CPU": 3}, ("PLACEMENT_GROUP", b"\x01" * 4, 0))


# -- resources ------------------------------------------------------------------------------
def test_fractions_add_back_to_exactly_zero() -> None:
    res = NodeResources({"CPU": 1})
    for _ in range(10):
        assert res.can_fit({"CPU": 0.1})
        res.acquire({"CPU": 0.1})
    assert not res.can_fit({"CPU": 0.1})
    for _ in range(10):
        res.release({"CPU": 0.1})
    assert res.available_dict() == {"CPU": 1.0}


def test_gpu_ids_whole_and_fractional() -> None:
    res = NodeResources({"GPU": 2})
    assert res.acquire({"GPU": 0.5}) == [0]
    # Fractions fill a partly used GPU first, so whole ones stay free for whole requests.
    assert res.acquire({"GPU": 0.25}) == [0]
    assert res.acquire({"GPU": 1}) == [1]
    assert not res.can_fit({"GPU": 1})  # 0.25 of a GPU is left, not a whole one
    assert res.can_fit({"GPU": 0.25})
    res.release({"GPU": 1}, [1])
    assert res.can_fit({"GPU": 1})


def test_feasible_is_against_the_total() -> None:
    res = NodeResources({"CPU": 2, "accel": 1})
    res.acquire({"CPU": 2, "accel": 1})
    assert res.feasible({"CPU": 2, "accel": 1}) and not res.can_fit({"CPU": 1})
    assert not res.feasible({"accel": 2})
    assert res.feasible({"other": 0})


def test_placement_group_resources_come_and_go() -> None:
    res = NodeResources({"CPU": 4})
    pg = b"\xab" * 4
    shape = apply_strategy({"CPU": 1}, ("PLACEMENT_GROUP", pg, 0))
    assert shape == {
        pg_resource_name("CPU", pg.hex(), 0): 1,
        pg_resource_name("bundle", pg.hex(), 0): 0.001,
    }
    assert not res.feasible(shape)
    res.add(pg_resource_name("CPU", pg.hex(), 0), 1)
    res.add(pg_resource_name("bundle", pg.hex(), 0), 1)
    assert res.can_fit(shape)
    res.remove(pg_resource_name("CPU", pg.hex(), 0), 1)
    res.remove(pg_resource_name("bundle", pg.hex(), 0), 1)
    assert res.total_dict() == {"CPU": 4.0} and res.available_dict() == {"CPU": 4.0}


@pytest.mark.parametrize(
    ("shape", "available", "ok"),
    [({"CPU": 1}, {"CPU": 1}, True), ({"CPU": 1.00001}, {"CPU": 1}, True), ({"X": 1}, {}, False)],
)
def test_fits_rounds_to_the_fixed_point_unit(shape: dict, available: dict, ok: bool) -> None:
    assert fits(shape, available) is ok


def test_a_bundles_gpus_go_to_its_tasks_and_back_to_the_node():
    from ember.resources import NodeResources, pg_resource_name

    res = NodeResources({"CPU": 4, "GPU": 4})
    pg = "ab" * 16
    held = res.acquire({"CPU": 1, "GPU": 2})  # the bundle's reservation
    assert held == [0, 1]
    res.reserve_bundle_gpus(pg, 0, held)
    for name in (pg_resource_name("GPU", pg), pg_resource_name("GPU", pg, 0)):
        res.add(name, 2)
    # A task in bundle 0 gets one of the bundle's GPUs; one in "any bundle" the other.
    first = res.acquire({pg_resource_name("GPU", pg, 0): 1})
    second = res.acquire({pg_resource_name("GPU", pg): 1})
    assert sorted(first + second) == [0, 1]
    assert res.acquire({"GPU": 2}) == [2, 3]  # the node's other GPUs are untouched
    res.release({pg_resource_name("GPU", pg, 0): 1}, first)
    assert res.acquire({pg_resource_name("GPU", pg, 0): 0.5}) == first  # free again
    # The group goes: its GPUs come back to the node.
    assert sorted(res.drop_group_gpus(pg)) == [0, 1]
    res.release({"CPU": 1, "GPU": 2}, held)
    assert res._pick_gpus(2) == [0, 1]
