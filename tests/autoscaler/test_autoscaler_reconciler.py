"""The reconciler's tick against a provider in memory: what it launches and stops, and
when it holds back. No cluster, no processes."""

from __future__ import annotations

import json

from ember.autoscaler.demand import reported_before_newest_change
from ember.autoscaler.instance import Instance, to_record
from ember.autoscaler.reconciler import SETTLE_AFTER_CHANGE_S, Reconciler

CONFIG = {
    "cluster_name": "c",
    "head_node_type": "head",
    "max_workers": 4,
    "idle_timeout_minutes": 5,
    "available_node_types": {
        "head": {"resources": {"CPU": 1}, "node_config": {}, "min_workers": 0, "max_workers": 0},
        "cpu": {"resources": {"CPU": 2}, "node_config": {}, "min_workers": 0, "max_workers": 4},
    },
    "provider": {"type": "test"},
}


class Provider:
    launches_in_parallel = False

    def __init__(self, nodes: dict | None = None) -> None:
        self.made: list[str] = []
        self.nodes = dict(nodes or {})
        self.stopped: list[str] = []

    def non_terminated_nodes(self, tag_filters):
        return list(self.nodes)

    def node_tags(self, pid):
        return dict(self.nodes[pid])

    def internal_ip(self, pid):
        return "127.0.0.1"

    def create_node_with_resources_and_labels(self, config, tags, count, res, labels):
        self.made.append(tags["ember-user-node-type"])
        return {f"p-{len(self.made)}": {}}

    def terminate_node(self, pid):
        self.stopped.append(pid)
        self.nodes.pop(pid, None)


def test_launches_wait_for_queue_reports_newer_than_the_newest_change() -> None:
    """The head still lists a request that a node which just joined has taken: counting both
    launched a node too many (seen with a restarted monitor). Launches wait for the next
    report, at most SETTLE_AFTER_CHANGE_S."""

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
    assert reported_before_newest_change(stale) and not reported_before_newest_change(fresh)
    # A cluster's first burst, queued on a head that just started: its own start moved
    # none of its requests anywhere, so nothing is held.
    alone = {"heartbeat_interval": 0.1, "nodes": [node(b"h", True, 100.0, 100.05, True, 0.0)]}
    assert not reported_before_newest_change(alone)
    # No heartbeat interval said (an older GCS): 0.5 s is assumed.
    assert reported_before_newest_change({"nodes": fresh["nodes"]})
    # Long after the join, the worker took a request (its report at 200.0 shows less free):
    # the head's report from before then may list it still; one three heartbeats on may not.
    taken = {**node(b"w", False, 100.0, 200.0, False, 0.0), "taken_at": 200.0}
    before = {"heartbeat_interval": 0.1, "nodes": [node(b"h", True, 1.0, 200.1, True, 1.0), taken]}
    after = {"heartbeat_interval": 0.1, "nodes": [node(b"h", True, 1.0, 200.35, True, 1.0), taken]}
    assert reported_before_newest_change(before) and not reported_before_newest_change(after)

    provider = Provider()
    rec = Reconciler(CONFIG, provider)
    assert rec.tick(stale, 100.1).launch == {} and provider.made == []
    # A head that reports again and still has it waiting: that is demand, launched at once.
    assert rec.tick(fresh, 100.5).launch == {"cpu": 1} and provider.made == ["cpu"]
    # A node that never reports again holds launches no longer than the settle time.
    rec2 = Reconciler(CONFIG, Provider())
    rec2.tick(stale, 200.0)
    assert rec2.tick(stale, 200.0 + SETTLE_AFTER_CHANGE_S / 2).launch == {}
    assert rec2.tick(stale, 200.0 + SETTLE_AFTER_CHANGE_S).launch == {"cpu": 1}


def test_a_ticks_stops_go_to_the_provider_in_one_call() -> None:
    """Four nodes whose Ember left the cluster are stopped in one tick, with one
    ``terminate_nodes`` call (fake_multinode stops them in one pass); a node the provider
    could not stop is asked again next tick."""

    class Batch(Provider):
        def __init__(self, nodes) -> None:
            super().__init__(nodes)
            self.calls: list[list[str]] = []

        def terminate_nodes(self, node_ids):
            self.calls.append(list(node_ids))
            for pid in node_ids:
                if pid != "p3":
                    self.terminate_node(pid)
            return {"p3": RuntimeError("1 process(es) of p3 would not exit")}

    tags = {"ember-cluster-name": "c", "ember-node-kind": "worker", "ember-user-node-type": "cpu"}
    provider = Batch({f"p{i}": {**tags, "ember-instance-id": f"i{i}"} for i in range(4)})
    records = []
    for i in range(4):
        inst = Instance.requested(f"i{i}", "cpu", 1.0)
        inst.fire("launch", 1.0)
        inst.provider_node_id = f"p{i}"
        inst.fire("created", 1.0)
        inst.fire("joined", 1.0)
        inst.node_id = f"{i:032x}"
        records.append(to_record(inst))
    saved = json.dumps({"version": 1, "instances": records}).encode()
    rec = Reconciler(CONFIG, provider, saved=saved)
    rec.tick({"nodes": []}, 2.0)  # none of their nodes is in the cluster any more
    assert [sorted(c) for c in provider.calls] == [["p0", "p1", "p2", "p3"]]
    assert sorted(provider.stopped) == ["p0", "p1", "p2"]
    notes = {i.instance_id: i.note or "" for i in rec.instances.values()}
    assert notes["i3"].startswith("terminate_node failed, asked again: 1 process(es)")
    rec.tick({"nodes": []}, 3.0)  # asked again
    assert [sorted(c) for c in provider.calls][-1] == ["p3"]


def test_the_next_idle_timeout_is_known_so_the_monitor_ticks_then() -> None:
    """``next_idle_due``: when the first idle worker reaches its timeout (its raylet's
    ``idle_since`` plus 5 minutes here); busy nodes, the head and timeouts already past
    (a node kept for its objects) are not counted."""

    def node(nid, is_head, free, idle_since):
        return {
            "node_id": nid * 16,
            "state": "ALIVE",
            "is_head": is_head,
            "resources_total": {"CPU": 2.0},
            "resources_available": {"CPU": free},
            "labels": {} if is_head else {"ember.io/node-type": "cpu"},
            "idle_since": idle_since,
        }

    rec = Reconciler(CONFIG, Provider())
    info = {
        "nodes": [
            node(b"h", True, 1.0, 50.0),
            node(b"a", False, 2.0, 40.0),
            node(b"b", False, 2.0, 90.0),
            node(b"c", False, 0.0, None),
        ]
    }
    rec.tick(info, 100.0)
    assert rec.next_idle_due == 40.0 + 300.0
    info["nodes"][1]["resources_available"] = {"CPU": 0.0}  # a takes work
    rec.tick(info, 101.0)
    assert rec.next_idle_due == 90.0 + 300.0
    rec.tick({"nodes": [node(b"h", True, 1.0, 50.0)]}, 102.0)
    assert rec.next_idle_due is None


def test_a_launch_is_in_the_status_while_its_create_runs() -> None:
    """An SSH host's create runs its setup commands first (minutes, for some): ``ember
    status`` shows the launch decision and the pending node during it, not after. When the
    first of a serial burst fails, the rest are not left pending: they wait for the backoff."""
    from ember.autoscaler.status import STATUS_KEY

    class Side:
        def __init__(self) -> None:
            self.kv: dict[bytes, bytes] = {}

        def put(self, key, value):
            self.kv[key] = value

        def drain_node(self, node_id, reason, draining):
            return {"leases": 0, "num_primary": 0}

    side = Side()
    seen: list[dict] = []

    class Slow(Provider):
        def create_node_with_resources_and_labels(self, config, tags, count, res, labels):
            seen.append(json.loads(side.kv[STATUS_KEY]))  # what a reader sees meanwhile
            if len(seen) == 1:
                raise RuntimeError("ssh: connect to host 10.0.0.9 port 22: Connection refused")
            return super().create_node_with_resources_and_labels(config, tags, count, res, labels)

    head = {
        "node_id": "h" * 32,
        "state": "ALIVE",
        "is_head": True,
        "resources_total": {"CPU": 1.0},
        "resources_available": {"CPU": 0.0},
        "labels": {},
        "pending_demands": [{"shape": {"CPU": 2.0}, "count": 2}],
    }
    rec = Reconciler(CONFIG, Slow(), side)
    rec.tick({"nodes": [head]}, 100.0)
    (during,) = seen
    assert [(d["action"], d["node_type"], d["count"]) for d in during["decisions"]] == [
        ("launch", "cpu", 2)
    ]
    assert during["node_types"]["cpu"]["pending"] == 2
    after = json.loads(side.kv[STATUS_KEY])
    assert after["node_types"]["cpu"]["pending"] == 0  # one failed, one never asked for
    assert [i.state.name for i in rec.instances.values()] == ["FAILED"]
