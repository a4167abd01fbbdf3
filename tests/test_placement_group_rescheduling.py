"""A placement group whose node dies is placed again, as Ray's: with real processes, a
group SPREAD over the head and a second node loses the second node (SIGKILL). It goes
RESCHEDULING, keeps its bundle on the head, and its lost bundle waits (no node has room)
through a GCS restart; a node with room joins, the lost bundle is reserved there and the
group is CREATED again. The actors that ran in the lost bundle follow their own rules: the
one with a restart left comes back in the bundle's new place, the other is dead."""

from __future__ import annotations

import ember
import pytest
from ember.exceptions import ActorDiedError
from ember.util.placement_group import placement_group, placement_group_table
from ember.util.scheduling_strategies import PlacementGroupSchedulingStrategy
from ember_test_utils import gcs_restart_cluster, kill_the_gcs, wait_until


@ember.remote
class Tally:
    """Counts its calls and says which node it runs on."""

    def __init__(self) -> None:
        self.calls = 0

    def call(self) -> tuple[int, str]:
        self.calls += 1
        return self.calls, ember.get_runtime_context().get_node_id()


@ember.remote
def node_of_task() -> str:
    return ember.get_runtime_context().get_node_id()


def test_a_group_losing_a_node_is_rescheduled_and_that_survives_a_gcs_restart(monkeypatch):
    with gcs_restart_cluster(monkeypatch, head_cpus=1) as cluster:
        doomed = cluster.add_node(num_cpus=1)
        cluster.connect()
        head_id, doomed_id = cluster.head_node.node_id.hex(), doomed.node_id.hex()
        pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="SPREAD")
        assert pg.wait(30)
        table = placement_group_table(pg)
        assert table["state"] == "CREATED"
        assert sorted(table["bundles_to_node_id"].values()) == sorted([head_id, doomed_id])
        [lost] = [i for i, n in table["bundles_to_node_id"].items() if n == doomed_id]
        kept = 1 - lost
        in_lost = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=lost)
        survivor = Tally.options(num_cpus=0.5, max_restarts=1, scheduling_strategy=in_lost).remote()
        mortal = Tally.options(num_cpus=0.5, max_restarts=0, scheduling_strategy=in_lost).remote()
        calls = [survivor.call.remote(), survivor.call.remote(), mortal.call.remote()]
        assert ember.get(calls, timeout=60) == [(1, doomed_id), (2, doomed_id), (1, doomed_id)]
        survivor_id, mortal_id = survivor._actor_id, mortal._actor_id

        # A task for the lost bundle, waiting there for room when the node dies: its owner
        # asks again, and it runs once the bundle has a node again.
        task = node_of_task.options(
            num_cpus=0.5, max_retries=3, scheduling_strategy=in_lost
        ).remote()
        cluster.remove_node(doomed, allow_graceful=False)

        def rescheduling() -> dict | None:
            t = placement_group_table(pg)
            return t if t["state"] == "RESCHEDULING" else None

        # The head's only CPU is the kept bundle's: the lost one has nowhere to go yet.
        table = wait_until(rescheduling, timeout=30, message="the group to go RESCHEDULING")
        assert table["bundles_to_node_id"] == {kept: head_id, lost: ""}
        why = table["stats"]["scheduling_state"]
        assert f"bundles [{lost}] again (lost with" in why, why
        with pytest.raises(ActorDiedError):
            ember.get(mortal.call.remote(), timeout=30)

        # The GCS dies while the group waits: the new one reads the same state back.
        kill_the_gcs(cluster.temp_root)
        table = placement_group_table(pg)
        assert table["state"] == "RESCHEDULING"
        assert table["bundles_to_node_id"] == {kept: head_id, lost: ""}

        # A node with room joins: the lost bundle is reserved there; CREATED again.
        fresh = cluster.add_node(num_cpus=1)
        assert pg.wait(30)
        table = placement_group_table(pg)
        assert table["state"] == "CREATED"
        assert table["bundles_to_node_id"] == {kept: head_id, lost: fresh.node_id.hex()}

        # The actor with a restart left came back in the bundle's new place (a new
        # process: its count starts again); the other stays dead.
        def actor(actor_id: bytes) -> dict:
            [row] = [a for a in cluster.gcs_call("list_actors") if a["actor_id"] == actor_id]
            return row

        wait_until(
            lambda: actor(survivor_id)["state"] == "ALIVE",
            timeout=60,
            message="the restartable actor to come back",
        )
        row = actor(survivor_id)
        assert row["num_restarts"] == 1 and row["node_id"] == fresh.node_id
        assert ember.get(survivor.call.remote(), timeout=60) == (1, fresh.node_id.hex())
        assert actor(mortal_id)["state"] == "DEAD"
        assert ember.get(task, timeout=60) == fresh.node_id.hex()
        # What the dashboard and the state API read: the same table.
        [listed] = [
            g
            for g in cluster.gcs_call("list_placement_groups")
            if g["placement_group_id"] == pg.id.hex()
        ]
        assert listed["state"] == "CREATED"
        assert listed["bundle_nodes"][lost] == fresh.node_id.hex()
