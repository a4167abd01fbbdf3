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


def test_launches_wait_for_queue_reports_newer_than_the_newest_join() -> None:
    """The head still lists a request that a node which just joined has taken: counting both
    launched a node too many (seen with a restarted monitor). Launches wait for the next
    report, at most SETTLE_AFTER_JOIN_S."""
    from ember.autoscaler.demand import reported_before_newest_join
    from ember.autoscaler.reconciler import SETTLE_AFTER_JOIN_S, Reconciler

    class Provider:
        launches_in_parallel = False

        def __init__(self) -> None:
            self.made: list[str] = []

        def non_terminated_nodes(self, tag_filters):
            return []

        def create_node_with_resources_and_labels(self, config, tags, count, res, labels):
            self.made.append(tags["ember-user-node-type"])
            return {f"p-{len(self.made)}": {}}

    config = {
        "cluster_name": "c",
        "head_node_type": "head",
        "max_workers": 4,
        "idle_timeout_minutes": 5,
        "available_node_types": {
            "head": {
                "resources": {"CPU": 1},
                "node_config": {},
                "min_workers": 0,
                "max_workers": 0,
            },
            "cpu": {"resources": {"CPU": 2}, "node_config": {}, "min_workers": 0, "max_workers": 4},
        },
        "provider": {"type": "test"},
    }

    def node(nid, is_head, start, demands_at, demand, free):
        return {
            "node_id": nid * 16,
            "state": "ALIVE",
            "is_head": is_head,
            "start_time": start,
            "demands_at": demands_at,
            "resources_total": {"CPU": 2.0},
            "resources_available": {"CPU": free},
            "labels": {} if is_head else {"ember.io/node-type": "cpu"},
            "pending_demands": [{"shape": {"CPU": 2.0}, "count": 1}] if demand else [],
        }

    # The worker (joined at 100.0) took the request; the head's report, made before it heard
    # of the worker (heartbeats of 0.1 s: three are 100.3), still has it.
    stale = {
        "heartbeat_interval": 0.1,
        "nodes": [
            node(b"h", True, 1.0, 100.2, True, 1.0),
            node(b"w", False, 100.0, None, False, 0.0),
        ],
    }
    fresh = {
        "heartbeat_interval": 0.1,
        "nodes": [
            node(b"h", True, 1.0, 100.4, True, 1.0),
            node(b"w", False, 100.0, 100.35, False, 0.0),
        ],
    }
    assert reported_before_newest_join(stale) and not reported_before_newest_join(fresh)
    # No heartbeat interval said (an older GCS): 0.5 s is assumed.
    assert reported_before_newest_join({"nodes": fresh["nodes"]})

    provider = Provider()
    rec = Reconciler(config, provider)
    assert rec.tick(stale, 100.1).launch == {} and provider.made == []
    # A head that reports again and still has it waiting: that is demand, launched at once.
    assert rec.tick(fresh, 100.5).launch == {"cpu": 1} and provider.made == ["cpu"]
    # A node that never reports again holds launches no longer than the settle time.
    rec2 = Reconciler(config, Provider())
    rec2.tick(stale, 200.0)
    assert rec2.tick(stale, 200.0 + SETTLE_AFTER_JOIN_S / 2).launch == {}
    assert rec2.tick(stale, 200.0 + SETTLE_AFTER_JOIN_S).launch == {"cpu": 1}
