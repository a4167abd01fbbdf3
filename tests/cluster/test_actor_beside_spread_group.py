"""An actor waiting for room, created before a STRICT_SPREAD placement group, is placed once
nodes with room join, although the group's bundles may take part of the node first chosen
for it (last session's unplaced-actor report: the GCS sent the actor's lease to a node that
a bundle then filled, and the lease waited in that raylet's queue for good)."""

from __future__ import annotations

import time

import ember
from ember.cluster_utils import Cluster
from ember.util.placement_group import placement_group, remove_placement_group


def test_an_actor_created_before_a_spread_group_is_placed_when_nodes_join(
    cluster: Cluster,
) -> None:
    cluster.connect()

    @ember.remote(num_cpus=1)
    def hold(seconds: float) -> str:
        time.sleep(seconds)
        return "done"

    @ember.remote(num_cpus=2)
    class Big:
        def ping(self) -> str:
            return "pong"

    refs = [hold.remote(3) for _ in range(3)]  # one runs on the 1-CPU head, two queue
    big = Big.remote()  # 2 CPUs: no node holds it yet
    pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_SPREAD")
    for _ in range(3):  # as an autoscaler would bring them, one after the other
        cluster.add_node(num_cpus=2)
    ember.get(pg.ready(), timeout=60)
    assert ember.get(refs, timeout=60) == ["done"] * 3
    assert ember.get(big.ping.remote(), timeout=60) == "pong"
    remove_placement_group(pg)
