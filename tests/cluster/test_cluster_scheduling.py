"""Scheduling across nodes: spillback, custom resources, SPREAD, node affinity, infeasible
demands that wait for a capable node, and data locality (issue 3 §3)."""

from __future__ import annotations

import os
import time

import ember
import numpy as np
import pytest
from ember.exceptions import TaskUnschedulableError
from ember.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from ember_test_utils import printed_to, wait_until


@ember.remote
def node_of(delay: float = 0.0) -> str:
    time.sleep(delay)
    return ember.get_runtime_context().get_node_id()


@ember.remote
def node_after_all(barrier: str, index: int, count: int) -> str:
    """Marks itself started in ``barrier`` and waits (30 s at most) until ``count`` tasks
    have: tasks that overlap for sure, whatever their workers' start-up takes."""
    open(os.path.join(barrier, str(index)), "w").close()
    deadline = time.monotonic() + 30
    while len(os.listdir(barrier)) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    return ember.get_runtime_context().get_node_id()


def test_tasks_spill_over_and_custom_resources_place_them(cluster):
    head = cluster.head_node
    worker = cluster.add_node(num_cpus=2, resources={"accel": 1})
    cluster.connect()
    # 3 one-CPU tasks that overlap: the head has 1 CPU, so two must spill to the worker.
    nodes = ember.get([node_of.remote(1.0) for _ in range(3)], timeout=30)
    assert set(nodes) == {head.node_id.hex(), worker.node_id.hex()}
    # A custom resource only the worker has.
    assert ember.get(node_of.options(resources={"accel": 1}).remote(), timeout=30) == (
        worker.node_id.hex()
    )

    @ember.remote(resources={"accel": 1})
    class Accel:
        def where(self) -> str:
            return ember.get_runtime_context().get_node_id()

    a = Accel.remote()
    assert ember.get(a.where.remote(), timeout=30) == worker.node_id.hex()


def test_spread_uses_every_node(cluster_factory, tmp_path):
    # Every node could hold all four tasks: by default they pack onto the driver's node (the
    # head), so only SPREAD puts them on all three nodes.
    cluster = cluster_factory(num_cpus=4)
    cluster.add_node(num_cpus=4)
    cluster.add_node(num_cpus=4)
    cluster.connect()
    packed = ember.get([node_of.remote(0.5) for _ in range(4)], timeout=30)
    assert set(packed) == {cluster.head_node.node_id.hex()}
    head = cluster.head_node.node_id

    def head_cpus_free() -> bool:  # the packed tasks' leases are back (they idle briefly)
        node = next(n for n in cluster.gcs_call("list_nodes") if n["node_id"] == head)
        return node["resources_available"].get("CPU") == 4.0

    wait_until(head_cpus_free, timeout=20, message="the head's CPUs to be free again")
    # Each SPREAD task waits until all four run, so each holds its own lease: with a fixed
    # sleep, a head task could end before another node's worker had started (CI stop 43: a
    # cold worker took longer than 0.5 s), and its lease rightly took the next queued task.
    barrier = tmp_path / "started"
    barrier.mkdir()
    spread_task = node_after_all.options(scheduling_strategy="SPREAD")
    spread = [spread_task.remote(str(barrier), i, 4) for i in range(4)]
    assert set(ember.get(spread, timeout=60)) == {n.node_id.hex() for n in cluster.list_all_nodes()}


def test_node_affinity_hard_soft_and_gone(cluster):
    worker = cluster.add_node(num_cpus=1)
    cluster.connect()
    target = worker.node_id.hex()
    hard = NodeAffinitySchedulingStrategy(target, soft=False)
    assert (
        ember.get([node_of.options(scheduling_strategy=hard).remote() for _ in range(3)])
        == [target] * 3
    )
    # A node without the resource: soft runs elsewhere.
    soft = NodeAffinitySchedulingStrategy(target, soft=True)
    head_only = node_of.options(scheduling_strategy=soft, resources={"headonly": 1})
    other = cluster.add_node(num_cpus=1, resources={"headonly": 1})
    assert ember.get(head_only.remote(), timeout=30) == other.node_id.hex()
    # Hard affinity to a node that is gone fails with a clear error.
    cluster.remove_node(worker)
    wait_until(lambda: worker.node_id not in cluster.alive_node_ids(), timeout=20)
    with pytest.raises(TaskUnschedulableError, match="not alive"):
        ember.get(node_of.options(scheduling_strategy=hard).remote(), timeout=30)


def _pending_demand(cluster, wanted) -> dict | None:
    """The first pending demand `ember status` shows for which ``wanted(demand)`` holds."""
    from ember.cli.status import summarize

    rows = summarize(cluster.gcs_call("cluster_info"))["pending_demands"]
    return next((d for d in rows if wanted(d)), None)


def test_infeasible_until_a_capable_node_joins(cluster):
    from ember.cli.status import render, summarize

    cluster.connect()
    ref = node_of.options(resources={"bigmem": 1}).remote()

    def demand() -> dict | None:
        return _pending_demand(cluster, lambda d: "bigmem" in d["shape"])

    # The raylet reports it with its next heartbeat; `ember status` flags it infeasible.
    pending = wait_until(demand, timeout=20, message="the task's pending demand")
    assert pending["infeasible"] and pending["shape"] == {"CPU": 1.0, "bigmem": 1.0}
    assert not ember.wait([ref], timeout=0)[0]
    text = render(summarize(cluster.gcs_call("cluster_info")))
    demands = text.split("Pending Demands:")[1]
    assert "bigmem: 1" in demands and "infeasible" in demands
    node = cluster.add_node(num_cpus=1, resources={"bigmem": 1})
    assert ember.get(ref, timeout=30) == node.node_id.hex()
    wait_until(lambda: demand() is None, timeout=20, message="the demand to leave the status")


def test_a_burst_sent_to_the_first_node_to_join_spreads_over_those_that_join_after(
    cluster, tmp_path
):
    """What an autoscaler's burst meets: tasks no node could run wait; the first node that
    joins gets them all (the only one that fits), and as more join, the tasks still waiting
    there move on to them instead of running one at a time on the first."""
    release = tmp_path / "release"

    @ember.remote(num_cpus=1, resources={"burst": 1})
    def hold(path: str) -> str:
        deadline = time.monotonic() + 60
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.05)
        return ember.get_runtime_context().get_node_id()

    cluster.connect()
    refs = [hold.remote(str(release)) for _ in range(3)]
    nodes = [cluster.add_node(num_cpus=1, resources={"burst": 1})]
    wait_until(lambda: _running(cluster) == 1, 20, 0.1, "one task running on the first node")
    nodes += [cluster.add_node(num_cpus=1, resources={"burst": 1}) for _ in range(2)]
    wait_until(lambda: _running(cluster) == 3, 30, 0.1, "all three running at once")
    release.touch()
    assert sorted(ember.get(refs, timeout=30)) == sorted(n.node_id.hex() for n in nodes)


def _running(cluster) -> int:
    tasks = ember.util.state.list_tasks(filters=[("state", "=", "RUNNING")], detail=True)
    return sum(1 for t in tasks if t["name"].endswith("hold"))


def test_actor_infeasible_until_a_capable_node_joins(cluster):
    cluster.connect()

    @ember.remote(resources={"bigbox": 1})
    class Big:
        def where(self) -> str:
            return ember.get_runtime_context().get_node_id()

    actor = Big.remote()
    call = actor.where.remote()

    def demand() -> dict | None:
        return _pending_demand(cluster, lambda d: d.get("actor", "").endswith("Big"))

    # Pending, and `ember status` flags it infeasible: no node alive has "bigbox".
    pending = wait_until(demand, timeout=20, message="the actor's pending demand")
    assert pending["infeasible"] and pending["shape"] == {"bigbox": 1.0}
    assert not ember.wait([call], timeout=0)[0]
    node = cluster.add_node(num_cpus=1, resources={"bigbox": 1})
    assert ember.get(call, timeout=30) == node.node_id.hex()
    wait_until(lambda: demand() is None, timeout=20, message="the demand to leave the status")


def test_large_arguments_pull_work_to_their_data(cluster):
    worker = cluster.add_node(num_cpus=2, resources={"maker": 1})
    cluster.connect()

    @ember.remote(resources={"maker": 1})
    def make() -> np.ndarray:
        return np.ones(4 * 1024 * 1024, dtype=np.uint8)  # 4 MiB: lives in the worker's store

    @ember.remote
    def consume(a: np.ndarray) -> tuple[str, int]:
        return ember.get_runtime_context().get_node_id(), int(a.sum())

    data = make.remote()
    ember.wait([data], timeout=30, fetch_local=False)  # made there, not copied here
    # The driver's own node (the head) has a free CPU, but the argument's bytes are on the
    # worker, which has a free CPU too: the work goes to the data.
    where, total = ember.get(consume.remote(data), timeout=30)
    assert total == 4 * 1024 * 1024
    assert where == worker.node_id.hex()


def test_worker_output_reaches_a_driver_on_another_node(cluster, monkeypatch):
    out = printed_to(monkeypatch, "stdout")
    worker = cluster.add_node(num_cpus=1, resources={"far": 1})
    cluster.connect()

    @ember.remote(resources={"far": 1})
    def shout() -> str:
        print("hello from the far node", flush=True)
        return ember.get_runtime_context().get_node_id()

    assert ember.get(shout.remote(), timeout=30) == worker.node_id.hex()
    wait_until(
        lambda: "hello from the far node" in out.getvalue(),
        timeout=10,
        message="the far worker's output in the driver",
    )


def test_placement_group_bundles_on_different_nodes(cluster):
    from ember.util.placement_group import placement_group
    from ember.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    cluster.add_node(num_cpus=1)
    cluster.connect()
    pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_SPREAD")
    ember.get(pg.ready(), timeout=30)
    nodes = [
        node_of.options(
            scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i)
        ).remote()
        for i in range(2)
    ]
    assert len(set(ember.get(nodes, timeout=30))) == 2
