"""Streaming generators across nodes (issue 17): items yielded on one node reach an owner on
another as they are yielded, large ones through the object store, and a node that dies
mid-stream ends the stream with the error at the next item."""

from __future__ import annotations

import os
import time

import ember
import numpy as np
import pytest
from ember.exceptions import WorkerCrashedError
from ember_test_utils import wait_until

pytestmark = pytest.mark.timeout(180)


def test_items_stream_from_another_node(cluster):
    far = cluster.add_node(num_cpus=1, resources={"far": 1})
    cluster.connect()

    @ember.remote(resources={"far": 1})
    def arrays(n: int):
        for i in range(n):
            yield (ember.get_runtime_context().get_node_id(), np.full(500_000, i, np.int64))

    @ember.remote(resources={"far": 1})
    class Far:
        def small(self, n: int):
            yield from range(n)

    items = [ember.get(ref, timeout=60) for ref in arrays.remote(3)]
    assert {node for node, _ in items} == {far.node_id.hex()}
    assert [int(a[-1]) for _, a in items] == [0, 1, 2]
    actor = Far.remote()
    assert [ember.get(r, timeout=60) for r in actor.small.remote(4)] == [0, 1, 2, 3]


def test_a_node_dying_mid_stream_fails_the_next_item(cluster):
    doomed = cluster.add_node(num_cpus=1, resources={"doomed": 1})
    cluster.connect()

    @ember.remote(resources={"doomed": 1}, max_retries=0)
    def slow():
        yield os.getpid()
        while True:
            time.sleep(0.1)
            yield 0

    gen = slow.remote()
    assert ember.get(next(gen), timeout=60) > 0
    cluster.remove_node(doomed, allow_graceful=False)
    wait_until(lambda: doomed.node_id not in cluster.alive_node_ids(), timeout=30)
    with pytest.raises(WorkerCrashedError):
        for ref in gen:
            ember.get(ref, timeout=30)
    with pytest.raises(StopIteration):
        next(gen)
