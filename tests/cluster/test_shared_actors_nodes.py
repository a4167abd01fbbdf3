"""Shared-process actors in a cluster: actors hosted on a worker node whose raylet is
SIGKILLed restart on a live node by their own rules (soft affinity lets them go), the ones
without restarts are DEAD naming the node, and another node's host never noticed."""

from __future__ import annotations

import os

import ember
import pytest
from ember.exceptions import ActorDiedError, ActorUnavailableError
from ember.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from ember_test_utils import wait_until


@ember.remote(shared_process=True)
class Cell:
    def __init__(self, i: int) -> None:
        self.i = i

    def where(self) -> tuple[int, str, int]:
        return self.i, ember.get_runtime_context().get_node_id(), os.getpid()


def test_shared_actors_of_a_dead_node_restart_elsewhere_each_by_its_rules(cluster):
    victim = cluster.add_node(num_cpus=1)
    survivor = cluster.add_node(num_cpus=1)
    cluster.connect()

    def on(node, **opts):
        strategy = NodeAffinitySchedulingStrategy(node.node_id.hex(), soft=True)
        return Cell.options(scheduling_strategy=strategy, **opts)

    keep = [on(victim, max_restarts=1).remote(i) for i in range(3)]
    lose = [on(victim).remote(10 + i) for i in range(2)]
    stay = [on(survivor).remote(20 + i) for i in range(2)]
    before = ember.get([a.where.remote() for a in keep + lose + stay], timeout=60)
    assert {w[1] for w in before[:5]} == {victim.node_id.hex()}
    assert {w[1] for w in before[5:]} == {survivor.node_id.hex()}
    stay_pids = {w[2] for w in before[5:]}

    cluster.remove_node(victim, allow_graceful=False)

    def restarted(a) -> bool:
        info = cluster.gcs_call("get_actor_info", {"actor_id": a._actor_id})
        return info["state"] == "ALIVE" and info["num_restarts"] == 1

    wait_until(lambda: all(restarted(a) for a in keep), timeout=60, message="the restarts")

    # Restarted on a live node (the head or the survivor), constructed again (their own
    # state), in shared processes there.
    # The GCS says ALIVE before the driver may have heard of the restart: a call sent to the
    # old incarnation meanwhile fails with ActorUnavailableError, Ray's "try again" (it
    # failed the fresh clone of 3eb7db7 so, once).
    def where_all():
        try:
            return ember.get([a.where.remote() for a in keep], timeout=90)
        except ActorUnavailableError:
            return None

    after = wait_until(where_all, timeout=90, message="calls to the restarted actors")
    assert [w[0] for w in after] == [0, 1, 2]
    alive = {n["node_id"].hex() for n in cluster.gcs_call("list_nodes") if n["state"] == "ALIVE"}
    assert {w[1] for w in after} <= alive and victim.node_id.hex() not in alive
    for a in lose:
        with pytest.raises(ActorDiedError) as e:
            ember.get(a.where.remote(), timeout=60)
        assert victim.node_id.hex()[:12] in str(e.value)
    # The survivor's host kept its actors, in the same process.
    again = ember.get([a.where.remote() for a in stay], timeout=30)
    assert [w[0] for w in again] == [20, 21] and {w[2] for w in again} == stay_pids
    rows = {r["actor_id"]: r for r in cluster.gcs_call("list_actors")}
    assert all(rows[a._actor_id]["state"] == "DEAD" for a in lose)
