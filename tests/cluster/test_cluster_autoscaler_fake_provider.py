"""The fake_multinode provider starts a real worker node (``ember start --address``) that joins
the cluster with its resources and node-type label, finds it again after a restart (its table
on disk), and stops exactly that node's processes."""

from __future__ import annotations

import os
import shutil
import tempfile
import time

from ember.autoscaler.demand import IdleClock, nodes_from_cluster_info
from ember.autoscaler.fake_multinode import FakeMultiNodeProvider
from ember.autoscaler.node_provider import TAG_NODE_KIND, TAG_USER_NODE_TYPE
from ember.cli.status import fetch
from ember.cluster_utils import Cluster
from ember.session_processes import find_ember_processes
from ember_test_utils import wait_until


def _info(c: Cluster) -> dict:
    return fetch(c.address, os.path.dirname(c.head_node.session_dir), c.token)


def test_a_fake_node_joins_with_its_type_and_is_stopped_alone(cluster: Cluster) -> None:
    root = tempfile.mkdtemp(prefix="emb-fake-", dir="/tmp")  # short: Unix socket paths
    config = {"gcs_address": cluster.address, "temp_dir": root, "token": cluster.token}
    provider = FakeMultiNodeProvider(config, "t")
    try:
        tags = {TAG_USER_NODE_TYPE: "cpu_worker", TAG_NODE_KIND: "worker"}
        made = provider.create_node_with_resources_and_labels(
            {}, tags, 1, {"CPU": 2, "Custom": 3}, {"zone": "a"}
        )
        (node_id,) = made
        assert provider.non_terminated_nodes({TAG_USER_NODE_TYPE: "cpu_worker"}) == [node_id]
        assert provider.non_terminated_nodes({TAG_USER_NODE_TYPE: "gpu_worker"}) == []
        assert provider.internal_ip(node_id) == "127.0.0.1"

        def joined() -> list:
            nodes = nodes_from_cluster_info(_info(cluster), "head", IdleClock(), time.time())
            return [n for n in nodes if n.node_type == "cpu_worker"]

        (worker,) = wait_until(joined, timeout=60, message="the fake node never joined")
        assert (worker.total["CPU"], worker.total["Custom"]) == (2.0, 3.0)
        labels = next(
            n["labels"] for n in _info(cluster)["nodes"] if n["node_id"].hex() == worker.node_id
        )
        assert labels["zone"] == "a"

        # A restarted autoscaler's provider finds the node and its tags.
        again = FakeMultiNodeProvider(config, "t")
        again.set_node_tags(node_id, {"ember-node-status": "up-to-date"})
        assert again.node_tags(node_id) == {**tags, "ember-node-status": "up-to-date"}

        head_procs = {
            p.pid for p in find_ember_processes(os.path.dirname(cluster.head_node.session_dir))
        }
        again.terminate_node(node_id)
        assert again.non_terminated_nodes({}) == []
        assert find_ember_processes(os.path.join(root, node_id)) == []
        # the head's processes are untouched
        assert head_procs <= {
            p.pid for p in find_ember_processes(os.path.dirname(cluster.head_node.session_dir))
        }
        again.terminate_node(node_id)  # already gone: not an error
        wait_until(lambda: not joined(), timeout=30, message="the GCS never saw the node go")
    finally:
        for node_id in FakeMultiNodeProvider(config, "t").non_terminated_nodes({}):
            FakeMultiNodeProvider(config, "t").terminate_node(node_id)
        shutil.rmtree(root, ignore_errors=True)
