"""AutoscalingCluster: a task needing more CPUs than the head has makes a worker node appear
(the autoscaler process, the fake_multinode provider, ``ember start`` of a real node), the task
runs there, and the idle node is removed after the idle timeout."""

from __future__ import annotations

import os

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

    node_id = ember.get(where.remote(), timeout=120)

    ran_on = next(n for n in _nodes(cluster) if n["node_id"].hex() == node_id)
    assert ran_on["labels"]["ember.io/node-type"] == "cpu_node"
    assert ran_on["resources_total"]["CPU"] == 2.0
    # Idle past 3 s: the autoscaler stops it; the head stays.
    wait_until(
        lambda: [n["is_head"] for n in _nodes(cluster) if n["state"] == "ALIVE"] == [True],
        timeout=60,
        message="the idle worker node was never removed",
    )
    with open(cluster.log_path) as f:
        log = f.read()
    assert "launching 1 x cpu_node" in log and "terminating fake-" in log


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
