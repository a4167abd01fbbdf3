"""AutoscalingCluster: a task needing more CPUs than the head has makes a worker node appear
(the autoscaler process, the fake_multinode provider, ``ember start`` of a real node), the task
runs there, and the idle node is removed after the idle timeout; every step is in the status
record the autoscaler writes to the GCS's KV each tick (what ``ember status`` and the Config
view read)."""

from __future__ import annotations

import os
import time

import ember
import pytest
from ember.autoscaler.sdk import request_resources
from ember.cli.status import fetch
from ember.cluster_utils import AutoscalingCluster
from ember_test_utils import wait_until

# Heartbeats often and a stopped node declared dead in seconds, so the test takes seconds.
FAST = {"EMBER_HEARTBEAT_INTERVAL": "0.2", "EMBER_NODE_DEATH_TIMEOUT": "2"}


@pytest.fixture
def cluster():
    """A 1-CPU head whose autoscaler adds up to two 2-CPU nodes, idle ones gone after 3 s;
    connected; everything stopped after the test."""
    if ember.is_initialized():
        ember.shutdown()
    cluster = AutoscalingCluster(
        head_resources={"CPU": 1},
        worker_node_types={
            "cpu_node": {"resources": {"CPU": 2}, "node_config": {}, "max_workers": 2}
        },
        idle_timeout_minutes=0.05,  # 3 s
        auth={"ssh_user": "ember", "ssh_private_key": "/home/ember/.ssh/id_ed25519"},
    )
    cluster.start(env=FAST)
    try:
        cluster.cluster.connect()
        yield cluster
    finally:
        if ember.is_initialized():
            ember.shutdown()
        cluster.shutdown()


def _nodes(cluster: AutoscalingCluster) -> list[dict]:
    """The GCS's node table (what ``ember status`` reads)."""
    temp_dir = os.path.dirname(cluster.cluster.head_node.session_dir)
    return fetch(cluster.address, temp_dir, cluster.cluster.token)["nodes"]


def test_a_workload_larger_than_the_head_adds_a_node_then_it_goes(
    cluster: AutoscalingCluster,
) -> None:
    @ember.remote(num_cpus=2)
    def where() -> str:
        return ember.get_runtime_context().get_node_id()

    ref = where.remote()
    records = []  # every status record seen while the task waits and runs
    deadline = time.monotonic() + 120
    while not ember.wait([ref], timeout=0)[0]:
        assert time.monotonic() < deadline, "the 2-CPU task never ran"
        records.append(cluster.status())
        time.sleep(0.05)
    node_id = ember.get(ref)

    ran_on = next(n for n in _nodes(cluster) if n["node_id"].hex() == node_id)
    assert ran_on["labels"]["ember.io/node-type"] == "cpu_node"
    assert ran_on["resources_total"]["CPU"] == 2.0

    # The demand that caused the launch was in the record while it waited.
    waiting = [r["demand"]["leases"] for r in records if r and r["demand"]["leases"]]
    assert waiting and waiting[0] == [{"shape": {"CPU": 2.0}, "count": 1}]

    def running_row():
        st = cluster.status()
        rows = [i for i in st["instances"] if i["state"] == "running"]
        return (st, rows[0]) if rows else None

    st, row = wait_until(running_row, timeout=30, message="no running instance in the record")
    assert (row["node_type"], row["node_id"], row["ip"]) == ("cpu_node", node_id, "127.0.0.1")
    assert row["instance_id"].startswith("i-") and row["error"] is None
    (launch,) = [d for d in st["decisions"] if d["action"] == "launch"]
    assert (launch["node_type"], launch["count"]) == ("cpu_node", 1)
    assert launch["reason"] == "queued tasks and pending actors: 1 x {'CPU': 2.0}"
    assert st["node_types"]["cpu_node"] == {
        "min_workers": 0,
        "max_workers": 2,
        "resources": {"CPU": 2},
        "running": 1,
        "pending": 0,
    }
    assert st["node_types"]["head"]["running"] == 1
    assert st["usage"]["CPU"][1] == 3.0
    assert st["monitor_pid"] == cluster.monitor.pid and st["cluster_name"] == "autoscaling-cluster"
    assert st["config"]["auth"] == {"ssh_user": "ember", "ssh_private_key": "***"}
    assert (st["version"], st["idle_timeout_s"], st["upscaling_speed"]) == (1, 3.0, 1.0)
    assert st["counters"]["started"] == 1 and st["counters"]["failed_create"] == 0

    # Idle past 3 s: the autoscaler drains the node, then stops it; the head stays.
    wait_until(
        lambda: [n["is_head"] for n in _nodes(cluster) if n["state"] == "ALIVE"] == [True],
        timeout=60,
        message="the idle worker node was never removed",
    )

    def ended():
        st = cluster.status()
        mine = [i for i in st["instances"] if i["instance_id"] == row["instance_id"]]
        return st if mine and mine[0]["state"] == "terminated" else None

    st = wait_until(ended, timeout=30, message="the instance never read terminated")
    actions = [(d["action"], d["instance_id"]) for d in st["decisions"]]
    assert actions == [
        ("launch", None),
        ("drain", row["instance_id"]),
        ("terminate", row["instance_id"]),
    ]
    assert st["decisions"][1]["reason"].startswith("idle for ")
    assert st["counters"]["stopped"] == 1


def test_request_resources_grows_the_cluster_and_withdrawing_it_shrinks_it(
    cluster: AutoscalingCluster,
) -> None:
    def alive_cpus() -> list[float]:
        return sorted(n["resources_total"]["CPU"] for n in _nodes(cluster) if n["state"] == "ALIVE")

    # 3 CPUs in total: the head's 1 and one 2-CPU node, though nothing runs.
    request_resources(num_cpus=3)
    wait_until(lambda: alive_cpus() == [1.0, 2.0], timeout=60, message="no node was added")
    request_resources(num_cpus=0)
    wait_until(lambda: alive_cpus() == [1.0], timeout=60, message="the node never went")
