"""The scheduler's inputs read from a cluster_info reply (the live cluster's version of this is
tests/cluster/test_cluster_autoscaler_demand.py)."""

from __future__ import annotations

from ember.autoscaler.demand import (
    NODE_TYPE_LABEL,
    IdleClock,
    demand_from_cluster_info,
    nodes_from_cluster_info,
)


def test_demand_read_from_cluster_info() -> None:
    group = "c1c556094761385bcf1ec88c1ae0e33c"
    info = {
        "nodes": [
            {
                "node_id": "h",
                "state": "ALIVE",
                "is_head": True,
                "resources_total": {"CPU": 1},
                "resources_available": {"CPU": 0},
                "pending_demands": [
                    {"shape": {"CPU": 1}, "count": 2},
                    # work inside a group: its room comes from the group's bundles
                    {"shape": {f"CPU_group_{group}": 1}, "count": 4},
                ],
            },
            {
                "node_id": "w",
                "state": "ALIVE",
                "labels": {NODE_TYPE_LABEL: "cpu_worker"},
                "resources_total": {"CPU": 2},
                "resources_available": {"CPU": 2},
            },
            {
                "node_id": "byhand",
                "state": "ALIVE",
                "resources_total": {"CPU": 2},
                "resources_available": {"CPU": 2},
            },
            {"node_id": "gone", "state": "DEAD", "pending_demands": [{"shape": {"CPU": 9}}]},
        ],
        "pending_actors": [{"resources": {"CPU": 2, "GPU": 0}, "class_name": "Big"}],
        "placement_groups": [
            {"state": "CREATED", "bundles": [{"CPU": 1}], "strategy": "PACK"},
            {"state": "PENDING", "bundles": [{"CPU": 1}, {"GPU": 1}], "strategy": "STRICT_PACK"},
            # rescheduling: only the bundle its dead node held is demand
            {
                "state": "RESCHEDULING",
                "bundles": [{"CPU": 1}, {"CPU": 3}],
                "bundle_nodes": ["w", None],
                "strategy": "SPREAD",
            },
        ],
    }
    demand = demand_from_cluster_info(info, requested=[{"CPU": 8}])
    assert demand.shapes == ({"CPU": 1.0}, {"CPU": 1.0}, {"CPU": 2.0})
    assert [(g.strategy, g.bundles) for g in demand.placement_groups] == [
        ("STRICT_PACK", ({"CPU": 1.0}, {"GPU": 1.0})),
        ("SPREAD", ({"CPU": 3.0},)),
    ]
    assert demand.requested == ({"CPU": 8.0},)
    clock = IdleClock()
    nodes = nodes_from_cluster_info(info, "head", clock, now=50.0)
    assert [(n.node_id, n.node_type, n.idle_since) for n in nodes] == [
        ("h", "head", None),
        ("w", "cpu_worker", 50.0),
        ("byhand", "", None),  # started by hand: never idle to the autoscaler
    ]
    # still idle later: the first time seen idle is kept; busy resets it
    assert nodes_from_cluster_info(info, "head", clock, now=60.0)[1].idle_since == 50.0
    info["nodes"][1]["resources_available"] = {"CPU": 1}
    assert nodes_from_cluster_info(info, "head", clock, now=70.0)[1].idle_since is None
    # Idle again, and its raylet says since when (the GCS's idle_since): the clock starts
    # there, not at this tick, which came a heartbeat and a tick later.
    info["nodes"][1]["resources_available"] = {"CPU": 2}
    info["nodes"][1]["idle_since"] = 78.5
    assert nodes_from_cluster_info(info, "head", clock, now=80.0)[1].idle_since == 78.5
    # A report from a clock ahead of this one never puts the start in the future.
    clock = IdleClock()
    info["nodes"][1]["idle_since"] = 95.0
    assert nodes_from_cluster_info(info, "head", clock, now=90.0)[1].idle_since == 90.0
