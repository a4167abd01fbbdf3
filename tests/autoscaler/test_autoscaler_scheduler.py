"""The scheduler as a table: demand and nodes in, launches and terminations out."""

from __future__ import annotations

from typing import Any

import pytest
from ember.autoscaler.config import prepare_config
from ember.autoscaler.scheduler import (
    Demand,
    NodeView,
    PlacementGroupDemand,
    Termination,
    report_once,
    schedule,
)

NOW = 10_000.0


def _config(max_workers: int = 10, speed: float = 1.0, **types: dict[str, Any]) -> dict:
    node_types = {"head": {"resources": {"CPU": 2}, "node_config": {}}}
    node_types.update(
        types
        or {
            "cpu": {"resources": {"CPU": 4}, "node_config": {}, "max_workers": 10},
            "gpu": {"resources": {"CPU": 8, "GPU": 2}, "node_config": {}, "max_workers": 2},
        }
    )
    for t in node_types.values():
        t.setdefault("node_config", {})
    return prepare_config(
        {
            "cluster_name": "t",
            "provider": {"type": "fake_multinode"},
            "max_workers": max_workers,
            "upscaling_speed": speed,
            "idle_timeout_minutes": 5,
            "available_node_types": node_types,
            "head_node_type": "head",
        }
    )


HEAD_BUSY = NodeView("head", "head", {"CPU": 2}, {"CPU": 0}, idle_since=None, is_head=True)


def _node(node_id: str, node_type: str = "cpu", free: float = 4, idle_for: float | None = None):
    total = {"CPU": 4} if node_type == "cpu" else {"CPU": 8, "GPU": 2}
    available = dict(total, CPU=free)
    idle = None if idle_for is None else NOW - idle_for
    return NodeView(node_id, node_type, total, available, idle_since=idle)


CPU = {"CPU": 1}


@pytest.mark.parametrize(
    ("demand", "nodes", "pending", "launch"),
    [
        # nothing asked, nothing launched
        (Demand(), [HEAD_BUSY], {}, {}),
        # 6 one-CPU tasks, the head full: two 4-CPU nodes (first-fit decreasing)
        (Demand(shapes=(CPU,) * 6), [HEAD_BUSY], {}, {"cpu": 2}),
        # free capacity on an existing node is used first
        (Demand(shapes=(CPU,) * 3), [HEAD_BUSY, _node("a", free=3)], {}, {}),
        (Demand(shapes=(CPU,) * 4), [HEAD_BUSY, _node("a", free=3)], {}, {"cpu": 1}),
        # a node already launching counts as free capacity: no double launch
        (Demand(shapes=(CPU,) * 4), [HEAD_BUSY], {"cpu": 1}, {}),
        # a GPU shape gets a GPU node; a CPU shape does not (the least waste)
        (Demand(shapes=({"GPU": 1},)), [HEAD_BUSY], {}, {"gpu": 1}),
        (Demand(shapes=({"CPU": 4},)), [HEAD_BUSY], {}, {"cpu": 1}),
        # ...but the GPU node's CPUs, once it comes, take CPU shapes too
        (Demand(shapes=({"GPU": 1}, {"CPU": 2})), [HEAD_BUSY], {}, {"gpu": 1}),
        # big first: a 3-CPU and three 1-CPU shapes fill one 4-CPU node and part of another
        (Demand(shapes=(CPU, CPU, {"CPU": 3}, CPU)), [HEAD_BUSY], {}, {"cpu": 2}),
        # request_resources counts total capacity, not what is free
        (Demand(requested=({"CPU": 4},) * 2), [HEAD_BUSY, _node("a", free=0)], {}, {"cpu": 1}),
        # STRICT_SPREAD: three bundles on three different nodes
        (
            Demand(placement_groups=(PlacementGroupDemand((CPU,) * 3, "STRICT_SPREAD"),)),
            [HEAD_BUSY],
            {},
            {"cpu": 3},
        ),
        # STRICT_SPREAD uses one free node, then new ones
        (
            Demand(placement_groups=(PlacementGroupDemand((CPU,) * 3, "STRICT_SPREAD"),)),
            [HEAD_BUSY, _node("a")],
            {},
            {"cpu": 2},
        ),
        # STRICT_PACK: 3 x 2 CPUs summed, so one node that holds 6: the gpu type (8 CPU)
        (
            Demand(placement_groups=(PlacementGroupDemand(({"CPU": 2},) * 3, "STRICT_PACK"),)),
            [HEAD_BUSY],
            {},
            {"gpu": 1},
        ),
        # PACK: bundles packed like any shapes: 3 x 2 CPUs on 2 cpu nodes
        (
            Demand(placement_groups=(PlacementGroupDemand(({"CPU": 2},) * 3, "PACK"),)),
            [HEAD_BUSY],
            {},
            {"cpu": 2},
        ),
    ],
)
def test_launches(demand: Demand, nodes: list, pending: dict, launch: dict) -> None:
    decision = schedule(_config(), nodes, demand, NOW, pending)
    assert decision.launch == launch
    assert decision.infeasible == [] and decision.terminate == []


def test_min_workers_are_launched_and_count_against_max() -> None:
    config = _config(
        max_workers=3,
        cpu={"resources": {"CPU": 4}, "min_workers": 2, "max_workers": 5},
        gpu={"resources": {"GPU": 1}, "min_workers": 1},
    )
    decision = schedule(config, [HEAD_BUSY], Demand(shapes=(CPU,) * 40), NOW)
    # min_workers fill 3; the overall max of 3 leaves nothing for the tasks, which wait
    assert decision.launch == {"cpu": 2, "gpu": 1}
    assert len(decision.unmet) == 40 - 8


def test_per_type_max_workers() -> None:
    config = _config(cpu={"resources": {"CPU": 4}, "max_workers": 2})
    decision = schedule(config, [HEAD_BUSY, _node("a", free=0)], Demand(shapes=(CPU,) * 12), NOW)
    assert decision.launch == {"cpu": 1}
    assert len(decision.unmet) == 8


def test_draining_nodes_count_against_max_workers_but_not_min_workers() -> None:
    """A node on its way out is still a machine the provider holds: with 2 of 3 allowed
    workers draining, one more may come; a min_workers 1 type whose one node drains gets a
    replacement (the draining node will not hold work)."""
    config = _config(max_workers=3, cpu={"resources": {"CPU": 4}, "max_workers": 3})
    demand = Demand(shapes=(CPU,) * 12)
    decision = schedule(config, [HEAD_BUSY], demand, NOW, leaving={"cpu": 2})
    assert decision.launch == {"cpu": 1}
    assert len(decision.unmet) == 12 - 4
    assert schedule(config, [HEAD_BUSY], demand, NOW, leaving={"cpu": 3}).launch == {}
    config = _config(cpu={"resources": {"CPU": 4}, "min_workers": 1, "max_workers": 2})
    decision = schedule(config, [HEAD_BUSY], Demand(), NOW, leaving={"cpu": 1})
    assert decision.launch == {"cpu": 1}


@pytest.mark.parametrize(
    ("speed", "running", "launch"),
    [
        (1.0, 0, 5),  # always up to 5 at once
        (1.0, 8, 8),  # speed 1: the type may double
        (0.5, 20, 10),
        (2.0, 4, 8),
    ],
)
def test_upscaling_speed_limits_demand_launches(speed: float, running: int, launch: int) -> None:
    config = _config(
        max_workers=100, speed=speed, cpu={"resources": {"CPU": 1}, "max_workers": 100}
    )
    nodes = [HEAD_BUSY] + [NodeView(f"n{i}", "cpu", {"CPU": 1}, {"CPU": 0}) for i in range(running)]
    decision = schedule(config, nodes, Demand(shapes=(CPU,) * 50), NOW)
    assert decision.launch == {"cpu": launch}
    assert len(decision.unmet) == 50 - launch


def test_upscaling_speed_counts_pending_launches() -> None:
    config = _config(max_workers=100, cpu={"resources": {"CPU": 1}, "max_workers": 100})
    decision = schedule(config, [HEAD_BUSY], Demand(shapes=(CPU,) * 50), NOW, {"cpu": 3})
    assert decision.launch == {"cpu": 2}


def test_groups_and_requests_are_not_limited_by_upscaling_speed() -> None:
    config = _config(max_workers=100, cpu={"resources": {"CPU": 1}, "max_workers": 100})
    group = PlacementGroupDemand((CPU,) * 8, "STRICT_SPREAD")
    decision = schedule(config, [HEAD_BUSY], Demand(placement_groups=(group,)), NOW)
    assert decision.launch == {"cpu": 8}
    decision = schedule(config, [HEAD_BUSY], Demand(requested=(CPU,) * 9), NOW)
    assert decision.launch == {"cpu": 7}  # the head's 2 CPUs count toward the total


def test_infeasible_shapes_are_reported_once_and_not_launched() -> None:
    huge = {"CPU": 64}
    tpu = {"TPU": 1}
    decision = schedule(_config(), [HEAD_BUSY], Demand(shapes=(huge, huge, tpu, CPU)), NOW)
    assert decision.launch == {"cpu": 1}
    assert decision.infeasible == [{"CPU": 64.0}, {"TPU": 1.0}]
    reported: set = set()
    assert report_once(reported, decision.infeasible) == [{"CPU": 64.0}, {"TPU": 1.0}]
    assert report_once(reported, [huge, {"GPU": 9}]) == [{"GPU": 9.0}]


def test_a_head_with_detected_resources_holds_what_its_config_left_empty() -> None:
    config = _config(cpu={"resources": {"CPU": 1}})
    config["available_node_types"]["head"]["resources"] = {}
    head = NodeView("head", "head", {"CPU": 2, "custom": 1}, {"CPU": 2, "custom": 1}, is_head=True)
    decision = schedule(config, [head], Demand(shapes=({"custom": 1},)), NOW)
    assert decision.infeasible == [] and decision.launch == {}


@pytest.mark.parametrize(
    ("nodes", "demand", "terminated"),
    [
        # idle past 5 minutes: removed; idle less: kept; busy: kept
        ([_node("a", idle_for=301), _node("b", idle_for=299), _node("c", free=0)], Demand(), ["a"]),
        # the head is never removed
        (
            [NodeView("head", "head", {"CPU": 2}, {"CPU": 2}, NOW - 9999, is_head=True)],
            Demand(),
            [],
        ),
        # an idle node pending work will be packed onto is kept
        ([_node("a", idle_for=900)], Demand(shapes=(CPU,)), []),
        # request_resources keeps the capacity it asked for; the longest idle goes first
        (
            [_node("a", idle_for=400), _node("b", idle_for=900)],
            Demand(requested=({"CPU": 4},)),
            ["b"],
        ),
    ],
)
def test_idle_terminations(nodes: list, demand: Demand, terminated: list[str]) -> None:
    decision = schedule(_config(), [HEAD_BUSY, *nodes], demand, NOW)
    assert [t.node_id for t in decision.terminate] == terminated


def test_never_below_min_workers_and_the_reason_is_given() -> None:
    config = _config(cpu={"resources": {"CPU": 4}, "min_workers": 1})
    nodes = [HEAD_BUSY, _node("a", idle_for=1000), _node("b", idle_for=600)]
    decision = schedule(config, nodes, Demand(), NOW)
    assert decision.terminate == [Termination("a", "cpu", "idle for 1000s (limit 300s)")]
    assert decision.launch == {}


def test_a_types_own_idle_timeout() -> None:
    config = _config(cpu={"resources": {"CPU": 4}, "idle_timeout_s": 30})
    decision = schedule(config, [HEAD_BUSY, _node("a", idle_for=31)], Demand(), NOW)
    assert [t.node_id for t in decision.terminate] == ["a"]


def test_an_unknown_strategy_is_refused() -> None:
    with pytest.raises(ValueError, match="strategy 'STRICT': one of PACK, SPREAD"):
        PlacementGroupDemand((CPU,), "STRICT")


def test_a_node_started_by_hand_is_capacity_but_not_counted_as_a_worker() -> None:
    config = _config(max_workers=1, cpu={"resources": {"CPU": 4}, "max_workers": 1})
    by_hand = NodeView("x", "", {"CPU": 8}, {"CPU": 2})
    decision = schedule(config, [HEAD_BUSY, by_hand], Demand(shapes=(CPU,) * 6), NOW)
    assert decision.launch == {"cpu": 1}  # 2 CPUs on the hand-started node, 4 on the new one
    assert decision.unmet == []
