"""``/metrics`` of a two-node cluster on one machine: the worker node's agent, in a process of
its own, reports that process's cost; resources add up over the nodes; both name sets keep
the two nodes' series apart though they share an ip; a node that leaves reads as dead."""

from __future__ import annotations

import subprocess
import urllib.request
from collections import Counter

import ember
import pytest
from ember.cluster_utils import Cluster
from ember_test_utils import assert_no_ember_children, wait_until
from prometheus_client.parser import text_string_to_metric_families
from prometheus_server import tool

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def cluster():
    if ember.is_initialized():
        ember.shutdown()
    c = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1},
        env={"EMBER_HEARTBEAT_INTERVAL": "0.2", "EMBER_NODE_DEATH_TIMEOUT": "2"},
    )
    try:
        yield c
    finally:
        c.shutdown()
        assert_no_ember_children()


def _samples(url: str, query_string: str = "") -> list:
    with urllib.request.urlopen(f"{url}/metrics{query_string}", timeout=10) as resp:
        text = resp.read().decode()
    return [s for f in text_string_to_metric_families(text) for s in f.samples]


def _one(samples: list, name: str, **labels: str) -> float | None:
    found = [
        s.value
        for s in samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(found) <= 1, (name, labels, found)
    return found[0] if found else None


def _no_duplicates(samples: list) -> None:
    seen = Counter((s.name, frozenset(s.labels.items())) for s in samples)
    assert not [k for k, n in seen.items() if n > 1]


def test_two_nodes_one_machine(cluster):
    worker = cluster.add_node(num_cpus=2)
    ctx = cluster.connect()
    url = ctx.dashboard_url
    head_id, worker_id = cluster.head_node.node_id.hex(), worker.node_id.hex()

    def settled() -> list | None:
        s = _samples(url)
        ok = (
            _one(s, "ember_nodes", state="ALIVE") == 2
            and _one(s, "ember_cluster_resources", resource="CPU") == 3
            and _one(s, "ember_agent_info", node_id=worker_id, process="own") == 1
            and _one(s, "ember_agent_info", node_id=head_id, process="dashboard") == 1
            and _one(s, "ember_agent_resident_memory_bytes", node_id=worker_id)
        )
        return s if ok else None

    samples = wait_until(settled, timeout=60, interval=0.5, message="both nodes' samples")
    assert _one(samples, "ember_agent_resident_memory_bytes", node_id=worker_id) > 10 * 2**20
    assert _one(samples, "ember_agent_cpu_percent", node_id=worker_id) is not None
    assert _one(samples, "ember_agent_resident_memory_bytes", node_id=head_id) is None
    _no_duplicates(samples)
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        done = subprocess.run(
            [tool("promtool"), "check", "metrics"], input=resp.read(), capture_output=True
        )
    assert (done.returncode, done.stdout + done.stderr) == (0, b"")

    ray = _samples(url, "?compat=ray")
    _no_duplicates(ray)
    ips = {s.labels["ip"] for s in ray if s.name == "ray_node_cpu_count"}
    nodes = {s.labels["NodeId"] for s in ray if s.name == "ray_node_cpu_count"}
    assert len(ips) == 1 and nodes == {head_id, worker_id}
    cpus = sum(s.value for s in ray if s.name == "ray_resources" and s.labels["Name"] == "CPU")
    assert cpus == 3
    assert _one(ray, "ray_cluster_active_nodes", node_type="worker") == 1
    assert _one(ray, "ray_cluster_active_nodes", node_type="head") == 1

    cluster.remove_node(worker)

    def worker_gone() -> bool:
        s = _samples(url)
        return (
            _one(s, "ember_nodes", state="DEAD") == 1
            and _one(s, "ember_node_up", node_id=worker_id) == 0
            and _one(s, "ember_cluster_resources", resource="CPU") == 1
            and _one(s, "ember_agent_info", node_id=worker_id, process="own") is None
        )

    wait_until(worker_gone, timeout=60, interval=0.5, message="the worker node to read dead")
    ray = _samples(url, "?compat=ray")
    assert _one(ray, "ray_cluster_failed_nodes", node_type="worker") == 1
    assert {s.labels["NodeId"] for s in ray if s.name == "ray_node_cpu_count"} == {head_id}
