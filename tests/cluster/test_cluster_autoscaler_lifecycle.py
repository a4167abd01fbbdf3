"""The autoscaler's loop on its instance lifecycle, against real nodes (fake_multinode):
a node that never joins is terminated after the join timeout and counted failed, its type
backing off; infeasible demand is reported once; a monitor SIGKILLed right after a launch
decision, started again, neither launches twice nor forgets the node; a node holding the
only copy of an object still referenced is kept until the reference goes.

One cluster for the module: each test leaves no worker node behind for the next."""

from __future__ import annotations

import json
import os
import time

import ember
import numpy as np
import pytest
from ember.cli.status import fetch
from ember.cluster_utils import AutoscalingCluster
from ember.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from ember_test_utils import wait_until

FAST = {
    "EMBER_HEARTBEAT_INTERVAL": "0.2",
    "EMBER_NODE_DEATH_TIMEOUT": "2",
    "EMBER_AUTOSCALER_JOIN_TIMEOUT_S": "8",  # the never-joining node fails in seconds
    "EMBER_AUTOSCALER_BACKOFF_S": "600",  # one failure in this test's time, not a retry storm
    "EMBER_AUTOSCALER_BACKOFF_MAX_S": "600",
}


@pytest.fixture(scope="module")
def cluster():
    if ember.is_initialized():
        ember.shutdown()
    cluster = AutoscalingCluster(
        head_resources={"CPU": 1},
        worker_node_types={
            "cpu_node": {"resources": {"CPU": 2}, "node_config": {}, "max_workers": 2},
            # The fake provider's test hook: its nodes are recorded, never started.
            "broken": {
                "resources": {"CPU": 1, "broken": 1},
                "node_config": {"test_never_join": True},
                "max_workers": 1,
            },
        },
        idle_timeout_minutes=0.05,  # 3 s
    )
    cluster.start(env=FAST, interval=0.2)
    try:
        cluster.cluster.connect()
        yield cluster
    finally:
        if ember.is_initialized():
            ember.shutdown()
        cluster.shutdown()


def _workers(cluster: AutoscalingCluster) -> list[dict]:
    temp_dir = os.path.dirname(cluster.cluster.head_node.session_dir)
    nodes = fetch(cluster.address, temp_dir, cluster.cluster.token)["nodes"]
    return [n for n in nodes if n["state"] == "ALIVE" and not n["is_head"]]


def _no_workers(cluster: AutoscalingCluster) -> None:
    wait_until(lambda: not _workers(cluster), timeout=60, message="a worker node stayed")


def _provider_nodes(cluster: AutoscalingCluster) -> dict:
    path = os.path.join(cluster.cluster.temp_root, "as", "fake_multinode_nodes.json")
    with open(path) as f:
        return json.load(f)


def test_a_node_that_never_joins_is_failed_and_infeasible_demand_is_reported_once(
    cluster: AutoscalingCluster,
) -> None:
    @ember.remote(num_cpus=1, resources={"broken": 1})
    def on_broken() -> int:
        return 1

    @ember.remote(num_cpus=64)
    def too_big() -> int:
        return 1

    waiting = [on_broken.remote(), too_big.remote()]

    def failed_row():
        st = cluster.status()
        rows = [i for i in (st or {}).get("instances", []) if i["node_type"] == "broken"]
        return (st, rows[0]) if rows and rows[0]["state"] == "failed" else None

    st, row = wait_until(failed_row, timeout=60, message="the broken node was never failed")
    assert row["error"] == "did not join the cluster within 8 s" and row["node_id"] is None
    assert st["counters"]["failed_join"] == 1
    assert st["backoff"]["broken"]["failures"] == 1
    assert st["backoff"]["broken"]["until"] > time.time() + 500
    failed = [d for d in st["decisions"] if d["action"] in ("failed", "backoff")]
    assert [(d["action"], d["node_type"]) for d in failed] == [
        ("failed", "broken"),
        ("backoff", "broken"),
    ]
    assert failed[0]["reason"] == "did not join the cluster within 8 s"
    assert "no launch of this type for 600 s" in failed[1]["reason"]
    # What the provider made for it is gone.
    assert not [
        n
        for n in _provider_nodes(cluster).values()
        if n["tags"].get("ember-user-node-type") == "broken"
    ]

    # The 64-CPU task: infeasible, with its shape and count, reported once over many ticks.
    assert st["infeasible"][0]["shape"] == {"CPU": 64.0}
    assert st["infeasible"][0]["count"] == 1
    time.sleep(1.0)  # five more ticks
    st = cluster.status()
    reports = [d for d in st["decisions"] if d["action"] == "infeasible"]
    assert [(d["reason"], d["count"]) for d in reports] == [
        ("no node type can hold {'CPU': 64.0}", 1)
    ]
    # In backoff, the broken type is not launched again although its task still waits.
    assert [i["state"] for i in st["instances"] if i["node_type"] == "broken"] == ["failed"]
    for ref in waiting:
        ember.cancel(ref, force=True)


def test_a_monitor_killed_right_after_a_launch_decision_neither_relaunches_nor_forgets(
    cluster: AutoscalingCluster,
) -> None:
    _no_workers(cluster)
    started_before = cluster.status()["counters"]["started"]

    @ember.remote(num_cpus=2)
    def where() -> str:
        return ember.get_runtime_context().get_node_id()

    ref = where.remote()

    def launching() -> bool:
        raw = cluster.cluster.gcs_call("kv_get", {"namespace": "autoscaler", "key": b"instances"})
        rows = json.loads(raw)["instances"] if raw else []
        return any(r["state"] == "launching" and r["node_type"] == "cpu_node" for r in rows)

    # The instance is written as launching before the provider is asked: kill right then.
    wait_until(launching, timeout=60, interval=0.005, message="no launch was decided")
    old_pid = cluster.monitor.pid
    cluster.kill_monitor()
    # The adopted node's 'ember start' may take more than the module's 8 s to join on a
    # loaded machine; a join timeout would end it, and the type's 600 s backoff the test.
    cluster._monitor_env["EMBER_AUTOSCALER_JOIN_TIMEOUT_S"] = "60"
    cluster.start_monitor()

    node_id = ember.get(ref, timeout=120)
    st = wait_until(
        lambda: (s := cluster.status()) and s["monitor_pid"] != old_pid and s,
        timeout=30,
        message="the restarted monitor never wrote its record",
    )
    # Exactly one worker, the one the task ran on, known to the table as running.
    time.sleep(1.0)  # ticks of the new monitor: any double launch would show now
    assert [n["node_id"].hex() for n in _workers(cluster)] == [node_id]
    st = cluster.status()
    live = [i for i in st["instances"] if i["state"] not in ("terminated", "failed")]
    assert [(i["node_type"], i["state"], i["node_id"]) for i in live] == [
        ("cpu_node", "running", node_id)
    ]
    assert (
        len(
            [
                n
                for n in _provider_nodes(cluster).values()
                if n["tags"].get("ember-user-node-type") == "cpu_node"
            ]
        )
        == 1
    )
    assert st["counters"]["started"] <= started_before + 1
    _no_workers(cluster)  # and it still goes when idle


def test_a_node_holding_the_only_copy_of_a_referenced_object_is_kept(
    cluster: AutoscalingCluster,
) -> None:
    _no_workers(cluster)

    @ember.remote(num_cpus=2)
    def where() -> str:
        return ember.get_runtime_context().get_node_id()

    @ember.remote(num_cpus=2)
    def big() -> np.ndarray:
        return np.arange(500_000, dtype=np.int64)  # 4 MB: stored on the node that made it

    node_id = ember.get(where.remote(), timeout=120)
    there = NodeAffinitySchedulingStrategy(node_id, soft=False)
    ref = big.options(scheduling_strategy=there).remote()
    ember.wait([ref], timeout=60)

    def kept():
        st = cluster.status()
        rows = [i for i in st["instances"] if i["node_id"] == node_id]
        return rows[0] if rows and (rows[0]["note"] or "").startswith("kept:") else None

    row = wait_until(kept, timeout=30, message="the node was never reported kept")
    assert row["state"] == "running"
    assert row["note"] == "kept: holds 1 primary copy of objects still referenced"
    time.sleep(4.0)  # past the 3 s idle timeout again: still there
    assert [n["node_id"].hex() for n in _workers(cluster)] == [node_id]
    assert int(ember.get(ref, timeout=30).sum()) == sum(range(500_000))

    del ref  # the last reference: the copy is freed, the node may go
    _no_workers(cluster)
