"""``ember.wait(fetch_local=...)`` across nodes, with Ray's meaning: with True (the default) a
ref is ready only once its object is on this node, so wait pulls it here; with False it is
ready as soon as it exists on any node, and nothing moves."""

from __future__ import annotations

import ember
import numpy as np

MIB = 1024 * 1024


def test_wait_fetch_local_pulls_to_this_node_and_false_does_not(cluster):
    cluster.add_node(num_cpus=1, resources={"far": 1})
    cluster.connect()  # the driver runs on the head

    @ember.remote(resources={"far": 1})
    def make(fill: int) -> np.ndarray:
        return np.full(10 * MIB, fill, dtype=np.uint8)  # 10 MB: in the far node's store

    def head_stats() -> dict:
        return cluster.raylet_call(cluster.head_node, "node_stats")

    def pulled_to_head() -> list[str]:
        return [t["object_id"] for t in head_stats()["transfers"]]

    # fetch_local=False: ready once made on the far node; not copied here.
    stay = make.remote(1)
    ready, not_ready = ember.wait([stay], timeout=60, fetch_local=False)
    assert ready == [stay] and not_ready == []
    assert head_stats()["store"]["used_bytes"] < 10 * MIB

    # fetch_local=True (the default): when wait returns, the head's raylet holds a copy.
    come = make.remote(2)
    ready, not_ready = ember.wait([come], timeout=60)
    assert ready == [come] and not_ready == []
    assert pulled_to_head().count(come.hex()) == 1
    assert head_stats()["store"]["used_bytes"] >= 10 * MIB
    # get reads that copy: no second transfer.
    assert int(ember.get(come, timeout=60)[::MIB].sum()) == 2 * 10
    assert pulled_to_head().count(come.hex()) == 1

    # Meanwhile the fetch_local=False object never moved; get still pulls it when asked.
    assert stay.hex() not in pulled_to_head()
    assert int(ember.get(stay, timeout=60)[::MIB].sum()) == 1 * 10
    assert pulled_to_head().count(stay.hex()) == 1


def test_wait_fetch_local_counts_only_pulled_objects_and_times_out_cleanly(cluster):
    cluster.add_node(num_cpus=2, resources={"far": 2})
    cluster.connect()

    @ember.remote(resources={"far": 1})
    def make(i: int) -> np.ndarray:
        return np.full(10 * MIB, i, dtype=np.uint8)

    @ember.remote(num_cpus=0)
    def small() -> int:
        return 7  # inline: ready without any pull

    refs = [make.remote(i) for i in range(3)]
    inline = small.remote()
    ready, not_ready = ember.wait([*refs, inline], num_returns=4, timeout=60)
    assert set(ready) == {*refs, inline} and not_ready == []
    pulled = [
        t["object_id"] for t in cluster.raylet_call(cluster.head_node, "node_stats")["transfers"]
    ]
    assert all(pulled.count(r.hex()) == 1 for r in refs)
    assert [int(a[0]) for a in ember.get(refs, timeout=60)] == [0, 1, 2]
    # A wait that cannot be satisfied still ends at its timeout.
    never = make.options(resources={"nowhere": 1}).remote(9)
    ready, not_ready = ember.wait([never], timeout=0.5)
    assert ready == [] and not_ready == [never]
    ember.cancel(never)
