"""Objects across nodes (issue 3 §4): raylet-to-raylet pulls, owner-tracked copies."""

from __future__ import annotations

import ember
import numpy as np
from ember_test_utils import wait_until

GIB = 1024**3


def test_a_1gib_array_moves_between_nodes_intact(cluster_factory):
    # Each store must hold the whole array.
    cluster = cluster_factory(object_store_memory=GIB + 256 * 1024**2)
    worker = cluster.add_node(
        num_cpus=1, resources={"far": 1}, object_store_memory=GIB + 256 * 1024**2
    )
    cluster.connect()
    n = GIB // 8

    @ember.remote(resources={"far": 1})
    def make() -> np.ndarray:
        return np.arange(n, dtype=np.uint64)

    @ember.remote(resources={"far": 1})
    def where() -> str:
        return ember.get_runtime_context().get_node_id()

    ref = make.remote()
    a = ember.get(ref, timeout=120)  # pulled from the worker node's store into the head's
    assert a.nbytes == GIB
    assert int(a.sum(dtype=np.uint64)) == n * (n - 1) // 2
    idx = np.arange(0, n, 4099)
    assert np.array_equal(a[idx], idx.astype(np.uint64))
    assert ember.get(where.remote()) == worker.node_id.hex()
    del a, ref


def test_owner_tracks_copies_so_one_survives_its_first_node(cluster):
    first = cluster.add_node(num_cpus=1, resources={"first": 1})
    cluster.add_node(num_cpus=1, resources={"second": 1})
    cluster.connect()

    @ember.remote(resources={"first": 1})
    def make() -> np.ndarray:
        return np.full(2 * 1024 * 1024, 7, dtype=np.uint8)

    @ember.remote(resources={"second": 1})
    def total(a: np.ndarray) -> int:
        return int(a.sum())

    ref = make.options(max_retries=0).remote()
    assert int(ember.get(ref, timeout=30).sum()) == 7 * 2 * 1024 * 1024  # a copy on the head
    cluster.remove_node(first, allow_graceful=False)
    wait_until(lambda: first.node_id not in cluster.alive_node_ids(), timeout=20)
    # The second node asks the owner where the object is: the first node is dead, the head
    # still holds the copy the driver pulled.
    assert ember.get(total.remote(ref), timeout=30) == 7 * 2 * 1024 * 1024


def test_many_pulls_at_once_all_arrive(cluster):
    cluster.add_node(num_cpus=2, resources={"far": 2})
    cluster.connect()

    @ember.remote(resources={"far": 1})
    def make(i: int) -> np.ndarray:
        return np.full(1024 * 1024, i % 251, dtype=np.uint8)

    refs = [make.remote(i) for i in range(24)]  # more than max_concurrent_pulls at once
    ember.wait(refs, num_returns=24, timeout=60, fetch_local=False)
    arrays = ember.get(refs, timeout=60)
    assert [int(a[0]) for a in arrays] == [i % 251 for i in range(24)]
    # The head's raylet pulled them all, never more at once than its bound.
    stats = cluster.raylet_call(cluster.head_node, "node_stats")["transfer_stats"]
    assert stats["pulled"] >= 24 and stats["failed"] == 0
    assert 1 <= stats["peak"] <= stats["limit"]
    assert stats["bytes"] >= 24 * 1024 * 1024


def test_freeing_an_object_frees_every_node_copy(cluster):
    worker = cluster.add_node(num_cpus=1, resources={"far": 1})
    cluster.connect()

    @ember.remote(resources={"far": 1})
    def make() -> np.ndarray:
        return np.ones(8 * 1024 * 1024, dtype=np.uint8)

    def used(node) -> int:
        info = next(n for n in cluster.gcs_call("list_nodes") if n["node_id"] == node.node_id)
        return info["store_stats"].get("used_bytes", 0)

    ref = make.remote()
    assert int(ember.get(ref, timeout=30).sum()) == 8 * 1024 * 1024  # a copy here too
    wait_until(lambda: used(worker) >= 8 * 1024 * 1024, timeout=10)
    del ref
    wait_until(lambda: used(worker) == 0, timeout=10, message="the worker's copy to be freed")
    wait_until(lambda: used(cluster.head_node) == 0, timeout=10, message="the head's copy")
