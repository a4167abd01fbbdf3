"""``drain_node`` in the GCS (what the autoscaler calls before removing a node): a draining
node takes no new task, actor or bundle, its running task finishes and returns its value,
its raylet reports its leases until the last goes back, and undrained it takes work again."""

from __future__ import annotations

import os
import tempfile
import time

import ember
import pytest
from ember.cluster_utils import Cluster
from ember_test_utils import wait_until


def test_a_draining_node_takes_no_new_work_and_its_running_task_finishes(
    cluster: Cluster,
) -> None:
    worker = cluster.add_node(num_cpus=2, resources={"w": 2})
    cluster.connect()
    flag_dir = tempfile.mkdtemp(prefix="ember-drain-")
    started, release = os.path.join(flag_dir, "started"), os.path.join(flag_dir, "release")

    @ember.remote(num_cpus=1, resources={"w": 1})
    def long_task() -> str:
        open(started, "w").close()
        deadline = time.monotonic() + 120
        while not os.path.exists(release) and time.monotonic() < deadline:
            time.sleep(0.02)
        return ember.get_runtime_context().get_node_id()

    @ember.remote(num_cpus=1)
    def where() -> str:
        return ember.get_runtime_context().get_node_id()

    running = long_task.remote()
    wait_until(lambda: os.path.exists(started), timeout=60, message="the long task never ran")
    reply = cluster.gcs_call("drain_node", {"node_id": worker.node_id, "reason": "idle 3s"})
    assert (reply["draining"], reply["leases"]) == (True, 1)
    (row,) = [n for n in cluster.gcs_call("list_nodes") if n["node_id"] == worker.node_id]
    assert (row["draining"], row["drain_reason"]) == (True, "idle 3s")

    # New work goes to the head, although the worker has a free CPU.
    head = cluster.head_node.node_id.hex()
    assert ember.get([where.remote() for _ in range(3)], timeout=60) == [head] * 3
    # Work only the worker could run waits, as demand, while it drains.
    needs_worker = long_task.remote()
    ready, _ = ember.wait([needs_worker], timeout=2)
    assert ready == []

    open(release, "w").close()
    assert ember.get(running, timeout=60) == worker.node_id.hex()

    def leases() -> int:
        return cluster.gcs_call("drain_node", {"node_id": worker.node_id})["leases"]

    wait_until(lambda: leases() == 0, timeout=30, message="the lease never came back")
    ready, _ = ember.wait([needs_worker], timeout=1)
    assert ready == []  # still draining: nothing new started there

    reply = cluster.gcs_call("drain_node", {"node_id": worker.node_id, "draining": False})
    assert reply["draining"] is False
    assert ember.get(needs_worker, timeout=60) == worker.node_id.hex()
    (row,) = [n for n in cluster.gcs_call("list_nodes") if n["node_id"] == worker.node_id]
    assert row["draining"] is False


def test_draining_a_node_that_is_not_alive_names_it(cluster: Cluster) -> None:
    with pytest.raises(Exception, match="no live node 00ff"):
        cluster.gcs_call("drain_node", {"node_id": bytes.fromhex("00ff" * 14)})


def test_a_drained_node_that_leaves_is_no_warning_but_a_crashed_one_is(
    cluster: Cluster, caplog
) -> None:
    """The autoscaler drains an idle node, then stops it: drivers log that it left (INFO),
    not "node ... died" (a WARNING every driver prints) for each node of a scale-down. A
    node that was not draining still warns."""
    import logging

    drained = cluster.add_node(num_cpus=1)
    crashed = cluster.add_node(num_cpus=1)
    cluster.connect()
    caplog.set_level(logging.INFO, logger="ember")
    cluster.gcs_call("drain_node", {"node_id": drained.node_id, "reason": "idle 10s"})
    cluster.remove_node(drained)
    cluster.remove_node(crashed, allow_graceful=False)

    def said(node) -> list[logging.LogRecord]:
        short = node.node_id.hex()[:12]
        return [r for r in caplog.records if short in r.getMessage() and "node" in r.msg]

    wait_until(lambda: said(drained) and said(crashed), timeout=60, message=caplog.text)
    assert [(r.levelname, r.getMessage()) for r in said(drained)] == [
        ("INFO", f"node {drained.node_id.hex()[:12]} left after draining")
    ]
    (warning,) = said(crashed)
    assert warning.levelname == "WARNING" and "died" in warning.getMessage()
    # The stopped node's raylet said it was stopping; the killed one could not.
    reasons = {n["node_id"]: n.get("death_reason") for n in cluster.gcs_call("list_nodes")}
    assert reasons[drained.node_id] == "its raylet was stopped (SIGTERM)"
    assert reasons[crashed.node_id] == "its raylet disconnected"
