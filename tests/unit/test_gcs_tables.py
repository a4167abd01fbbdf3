"""The GCS's own logic with fake connections: node membership and the death timeout, actor
placement over nodes, names, jobs and placement groups. No processes or sockets; the event
loop only runs the GCS's own coroutines against fakes."""

from __future__ import annotations

import asyncio

import pytest
from ember.gcs.actor_machine import ActorState
from ember.gcs.nodes import NodeState
from ember.gcs.placement_groups import PgState
from ember.protocol.messages.gcs import NodeDeclaredDead, NoSuchActor
from gcs_fakes import FakeConn, add_node, make_gcs, run, settle, spec


# -- nodes ---------------------------------------------------------------------------------
def _subscriber_and_two_nodes(gcs):
    """A driver subscribed to node events, then two nodes: (driver, (id, conn), (id, conn))."""
    driver = FakeConn()
    gcs.on_connect(driver)
    gcs.handlers["subscribe_node_events"](driver, None)
    return driver, add_node(gcs), add_node(gcs)


def test_node_registration_and_the_death_timeout() -> None:
    gcs, clock, _ = make_gcs()
    driver, (a, a_conn), (b, _) = _subscriber_and_two_nodes(gcs)
    assert [n["node_id"] for n in gcs.node_table.cluster_view()] == [a, b]
    assert [body["node_id"] for body in driver.ops("node_added")] == [a, b]

    clock.now += 8
    gcs.handlers["heartbeat"](FakeConn(), {"node_id": b, "available": {"CPU": 2.0}})
    clock.now += 3  # a: 11 s silent, past the 10 s timeout; b: 3 s
    gcs.node_table.check_heartbeats()
    assert gcs.node_table.nodes[a].state is NodeState.DEAD
    assert gcs.node_table.nodes[b].state is NodeState.ALIVE
    assert gcs.handlers["list_nodes"](driver, None)[0]["state"] == "DEAD"
    assert "no heartbeat for 11.0 s" in gcs.node_table.nodes[a].death_reason
    assert driver.ops("node_dead")[0]["node_id"] == a
    assert a_conn.ops("declared_dead")
    # A dead node hears so on its next heartbeat and cannot rejoin under its old id.
    with pytest.raises(NodeDeclaredDead, match="not alive"):
        gcs.handlers["heartbeat"](a_conn, {"node_id": a, "available": {}})
    with pytest.raises(NodeDeclaredDead, match="declared dead"):
        gcs.handlers["register_node"](a_conn, {"node_id": a, "address": "x", "resources": {}})


def test_time_the_gcs_itself_was_stalled_is_no_nodes_silence() -> None:
    """A GCS frozen past the death timeout (an overloaded machine) wakes with its nodes'
    heartbeats unread in its sockets: those nodes were not silent, and must not be declared
    dead (each would rejoin under a new id while its driver keeps the old one)."""
    gcs, clock, _ = make_gcs()
    a, a_conn = add_node(gcs)
    clock.now += 15.5  # the monitor's 0.5 s sleep ended 15 s late
    gcs.node_table.check_heartbeats(stalled=15.0)
    assert gcs.node_table.nodes[a].state is NodeState.ALIVE
    assert not a_conn.ops("declared_dead")
    # The stall is forgiven once: silence after it still counts.
    clock.now += 10.5
    gcs.node_table.check_heartbeats()
    assert gcs.node_table.nodes[a].state is NodeState.DEAD
    assert "no heartbeat for 11.0 s" in gcs.node_table.nodes[a].death_reason


def test_the_monitor_measures_its_own_stall(monkeypatch: pytest.MonkeyPatch) -> None:
    """The monitor, not a test, decides how late it woke: a clock that jumps past the death
    timeout while it sleeps (the process did not run) kills no node."""
    from ember import config

    async def test() -> None:
        gcs, clock, _ = make_gcs()
        monkeypatch.setattr(config, "heartbeat_interval", 0.01)
        a, _ = add_node(gcs)
        monitor = asyncio.ensure_future(gcs.node_table.monitor())
        try:
            await asyncio.sleep(0.03)
            clock.now += 20.0  # frozen for 20 s, by the GCS's own clock
            await asyncio.sleep(0.05)
            assert gcs.node_table.nodes[a].state is NodeState.ALIVE
        finally:
            monitor.cancel()

    run(test)


def test_a_raylet_disconnecting_is_its_nodes_death() -> None:
    gcs, _, _ = make_gcs()
    a, a_conn = add_node(gcs)
    a_conn.closed = True
    gcs.on_connection_closed(a_conn)
    assert gcs.node_table.nodes[a].death_reason == "its raylet disconnected"
    assert gcs.node_table.alive() == []


def test_a_stopping_raylet_unregisters_its_node_at_once() -> None:
    """A raylet told to stop says so first: its node is dead now, with the raylet's reason,
    every subscriber hears of it, and the raylet is not told back it was declared dead.
    Only the node's own connection can say it leaves."""
    gcs, _, _ = make_gcs()
    driver, (a, a_conn), (b, _) = _subscriber_and_two_nodes(gcs)
    reason = "its raylet was stopped (SIGTERM)"
    gcs.handlers["unregister_node"](FakeConn(), {"node_id": a, "reason": reason})
    assert gcs.node_table.nodes[a].state is NodeState.ALIVE  # not a's raylet: ignored
    gcs.handlers["unregister_node"](a_conn, {"node_id": a, "reason": reason})
    assert gcs.node_table.nodes[a].state is NodeState.DEAD
    assert gcs.node_table.nodes[a].death_reason == reason
    assert [n.node_id for n in gcs.node_table.alive()] == [b]
    assert [body["node_id"] for body in driver.ops("node_dead")] == [a]
    assert not a_conn.ops("declared_dead")
    # Its connection closing afterwards changes nothing.
    a_conn.closed = True
    gcs.on_connection_closed(a_conn)
    assert gcs.node_table.nodes[a].death_reason == reason
    assert len(driver.ops("node_dead")) == 1


# -- actors --------------------------------------------------------------------------------
def test_an_actor_a_raylet_refused_is_placed_at_its_next_beat_though_nothing_more_is_free():
    """The GCS's view is a heartbeat old: it sends an actor's lease to a node whose room a
    driver's idle task lease holds; the raylet answers "not now" and the actor waits. The
    room frees, but the node's next beat shows what the view already showed: no increase.
    That beat must place the actor all the same (it waited for good: a cross-node test hung
    in CI about once in eight under load)."""

    async def test() -> None:
        gcs, _, _ = make_gcs()
        node, conn = add_node(gcs, cpus=1, far=1)
        answers = [None]  # the first lease request: "not now"

        def lease(body: dict) -> dict | None:
            if answers:
                return answers.pop()
            return {"lease_id": 7, "worker_id": (7).to_bytes(28, "big"), "address": "unix:/w7"}

        conn.replies["lease_actor_worker"] = lease
        owner = FakeConn()
        gcs.handlers["create_actor"](owner, spec(resources={"far": 1.0}))
        await settle()
        (actor,) = gcs.actors.actors.values()
        assert actor.state is ActorState.PENDING_CREATION
        (waiting,) = gcs.handlers["cluster_info"](owner, None)["pending_actors"]
        assert "free now: {far: 1}" in waiting["reason"]  # the view says free; it waits
        # The node's next beat shows exactly what the view did.
        gcs.handlers["heartbeat"](conn, {"node_id": node, "available": {"CPU": 1.0, "far": 1.0}})
        await settle()
        assert actor.state is ActorState.ALIVE and actor.node_id == node
        assert [u["state"] for u in owner.ops("actor_update")] == ["ALIVE"]

    run(test)


def test_actor_placement_over_nodes() -> None:
    async def test() -> None:
        gcs, _, workers = make_gcs()
        small, _ = add_node(gcs, cpus=1)
        big, big_conn = add_node(gcs, cpus=4)
        owner = FakeConn()
        gcs.handlers["create_actor"](owner, spec(resources={"CPU": 2.0}))
        await settle()
        (actor,) = gcs.actors.actors.values()
        assert actor.state is ActorState.ALIVE and actor.node_id == big
        assert workers[0].address == actor.address
        assert [u["state"] for u in owner.ops("actor_update")] == ["ALIVE"]
        # No node has a GPU: it waits, and says why.
        gcs.handlers["create_actor"](owner, spec(resources={"GPU": 1.0}))
        await settle()
        (waiting,) = gcs.handlers["cluster_info"](owner, None)["pending_actors"]
        assert waiting["reason"].startswith("infeasible: no node has {GPU: 1}")
        # A node with one joins: it is placed there.
        gpu_node, _ = add_node(gcs, cpus=1, GPU=1)
        await settle()
        placed = gcs.actors.actors[waiting["actor_id"]]
        assert placed.state is ActorState.ALIVE and placed.node_id == gpu_node

    run(test)


def test_node_death_restarts_its_actors_elsewhere() -> None:
    async def test() -> None:
        gcs, clock, _ = make_gcs()
        first, _ = add_node(gcs)
        owner = FakeConn()
        gcs.handlers["register_job"](owner, {"job_id": b"job1"})
        gcs.handlers["create_actor"](owner, spec(max_restarts=1))
        gcs.handlers["create_actor"](owner, spec())
        await settle()
        keeper, goner = gcs.actors.actors.values()
        assert keeper.node_id == goner.node_id == first
        second, _ = add_node(gcs)
        clock.now += 9
        gcs.handlers["heartbeat"](FakeConn(), {"node_id": second, "available": {"CPU": 2.0}})
        clock.now += 2
        gcs.node_table.check_heartbeats()
        await settle()
        assert keeper.state is ActorState.ALIVE and keeper.node_id == second
        assert keeper.num_restarts == 1
        assert goner.state is ActorState.DEAD and "died" in goner.death_cause
        states = [u["state"] for u in owner.ops("actor_update")]
        assert states == ["ALIVE", "ALIVE", "RESTARTING", "DEAD", "ALIVE"]

    run(test)


def test_a_name_is_released_on_death_and_can_be_reused() -> None:
    async def test() -> None:
        gcs, _, _ = make_gcs()
        node, node_conn = add_node(gcs)
        owner = FakeConn()
        first = spec(name="counter", namespace="ns")
        gcs.handlers["create_actor"](owner, first)
        await settle()
        found = gcs.handlers["get_named_actor"](owner, {"name": "counter", "namespace": "ns"})
        assert found["actor_id"] == first.actor_id
        with pytest.raises(ValueError, match="already taken"):
            gcs.handlers["create_actor"](owner, spec(name="counter", namespace="ns"))
        assert gcs.handlers["kill_actor"](owner, {"actor_id": first.actor_id}) is None
        assert (
            node_conn.ops("kill_worker")[0]["worker_id"]
            == gcs.actors.actors[first.actor_id].worker_id
        )
        assert (
            gcs.handlers["get_named_actor"](owner, {"name": "counter", "namespace": "ns"}) is None
        )
        assert gcs.handlers["list_named_actors"](owner, {"namespace": "ns"}) == []
        second = spec(name="counter", namespace="ns")
        gcs.handlers["create_actor"](owner, second)
        await settle()
        found = gcs.handlers["get_named_actor"](owner, {"name": "counter", "namespace": "ns"})
        assert found["actor_id"] == second.actor_id and found["state"] == "ALIVE"
        # Killing the dead one again does nothing; killing an unknown one is a typed error.
        assert gcs.handlers["kill_actor"](owner, {"actor_id": first.actor_id}) is None
        assert gcs.actors.actors[first.actor_id].state.name == "DEAD"
        with pytest.raises(NoSuchActor, match="no actor"):
            gcs.handlers["kill_actor"](owner, {"actor_id": b"\x01" * 16})

    run(test)


def test_a_drivers_disconnect_ends_its_job_and_its_non_detached_actors() -> None:
    async def test() -> None:
        gcs, _, _ = make_gcs()
        _, node_conn = add_node(gcs, cpus=4)
        driver = FakeConn()
        gcs.on_connect(driver)
        gcs.handlers["register_job"](driver, {"job_id": b"job9"})
        gcs.handlers["create_actor"](driver, spec(job=b"job9", max_restarts=-1))
        gcs.handlers["create_actor"](driver, spec(job=b"job9", detached=True, name="keep"))
        await settle()
        plain, detached = gcs.actors.actors.values()
        driver.closed = True
        gcs.on_connection_closed(driver)
        assert plain.state is ActorState.DEAD
        assert plain.death_cause == "its job ended (the driver disconnected)"
        assert detached.state is ActorState.ALIVE
        (job,) = gcs.handlers["list_jobs"](driver, None)
        assert job["state"] == "FINISHED"
        assert node_conn.ops("job_finished") == [{"job_id": b"job9"}]

    run(test)


def test_a_worker_death_reported_by_its_raylet_restarts_the_actor() -> None:
    async def test() -> None:
        gcs, _, workers = make_gcs()
        _, node_conn = add_node(gcs)
        owner = FakeConn()
        gcs.handlers["create_actor"](owner, spec(max_restarts=1))
        await settle()
        (actor,) = gcs.actors.actors.values()
        old = actor.worker_id
        body = {"actor_id": actor.actor_id, "worker_id": old, "reason": "exit code 1"}
        gcs.handlers["worker_died"](node_conn, body)
        assert actor.state is ActorState.RESTARTING and actor.death_cause == "exit code 1"
        await settle()
        assert actor.state is ActorState.ALIVE and actor.worker_id != old
        # A report about a worker the actor no longer uses changes nothing.
        gcs.handlers["worker_died"](node_conn, body)
        assert actor.state is ActorState.ALIVE and len(workers) == 2

    run(test)


# -- placement groups ----------------------------------------------------------------------
def test_placement_group_create_and_remove() -> None:
    async def test() -> None:
        gcs, _, _ = make_gcs()
        a, a_conn = add_node(gcs, cpus=2)
        b, b_conn = add_node(gcs, cpus=2)
        owner = FakeConn()
        pg_id = b"p" * 18
        body = {"pg_id": pg_id, "bundles": [{"CPU": 2}, {"CPU": 2}], "strategy": "STRICT_SPREAD"}
        gcs.handlers["create_placement_group"](owner, body)
        assert await gcs.handlers["wait_placement_group"](owner, {"pg_id": pg_id, "timeout": 1})
        info = gcs.handlers["get_placement_group"](owner, {"pg_id": pg_id})
        assert info["state"] == "CREATED"
        assert sorted(info["bundle_nodes"]) == sorted([a.hex(), b.hex()])
        # One more CPU anywhere is more than there is: it stays pending, with a reason.
        late = b"q" * 18
        gcs.handlers["create_placement_group"](owner, {"pg_id": late, "bundles": [{"CPU": 1}]})
        await settle()
        assert gcs.placement_groups.groups[late].state is PgState.PENDING
        assert gcs.handlers["remove_placement_group"](owner, {"pg_id": pg_id}) is None
        assert gcs.placement_groups.groups[pg_id].state is PgState.REMOVED
        assert a_conn.ops("release_bundles") == b_conn.ops("release_bundles") == [{"pg_id": pg_id}]
        assert not await gcs.handlers["wait_placement_group"](owner, {"pg_id": pg_id})
        # Removing twice is harmless.
        assert gcs.handlers["remove_placement_group"](owner, {"pg_id": pg_id}) is None

    run(test)


def test_a_group_refused_by_its_raylet_is_placed_once_a_heartbeat_shows_room() -> None:
    """The GCS's view said the room was free, but the raylet still held it (a task's lease
    not yet returned): the group waits, and the heartbeat that shows the room free again
    places it, with no node joining or dying in between."""

    async def test() -> None:
        gcs, _, _ = make_gcs()
        a, a_conn = add_node(gcs, cpus=2)
        answers = iter([False, True])
        a_conn.replies["reserve_bundles"] = lambda body: next(answers)
        owner = FakeConn()
        pg_id = b"r" * 18
        gcs.handlers["create_placement_group"](owner, {"pg_id": pg_id, "bundles": [{"CPU": 1}]})
        await settle()
        group = gcs.placement_groups.groups[pg_id]
        assert group.state is PgState.PENDING and "will retry" in group.reason
        # A wait that times out leaves no waiter behind (pg.wait(timeout) in a loop).
        for _ in range(3):
            assert not await gcs.handlers["wait_placement_group"](
                owner, {"pg_id": pg_id, "timeout": 0.01}
            )
        assert group.waiters == []
        gcs.handlers["heartbeat"](a_conn, {"node_id": a, "available": {"CPU": 2.0}})
        assert await gcs.handlers["wait_placement_group"](owner, {"pg_id": pg_id, "timeout": 1})
        assert group.state is PgState.CREATED

    run(test)


def test_a_placement_group_is_removed_with_its_job_unless_detached() -> None:
    async def test() -> None:
        gcs, _, _ = make_gcs()
        add_node(gcs, cpus=4)
        driver = FakeConn()
        gcs.handlers["register_job"](driver, {"job_id": b"j"})
        for pg_id, detached in ((b"1" * 18, False), (b"2" * 18, True)):
            body = {"pg_id": pg_id, "bundles": [{"CPU": 1}], "job_id": b"j", "detached": detached}
            gcs.handlers["create_placement_group"](driver, body)
        await settle()
        gcs.handlers["job_finished"](driver, {"job_id": b"j"})
        groups = gcs.placement_groups.groups
        assert groups[b"1" * 18].state is PgState.REMOVED
        assert groups[b"2" * 18].state is PgState.CREATED

    run(test)


def test_a_group_losing_a_node_reschedules_only_its_lost_bundles() -> None:
    """A CREATED group whose node dies goes RESCHEDULING: it keeps its other bundles, and
    its lost one is reserved again (only that one) on a node its strategy allows: with
    STRICT_SPREAD never beside a bundle it kept, however much room is there."""

    async def test() -> None:
        gcs, _, _ = make_gcs()
        a, a_conn = add_node(gcs, cpus=4)
        b, _ = add_node(gcs, cpus=2)
        owner = FakeConn()
        pg_id = b"s" * 18
        body = {"pg_id": pg_id, "bundles": [{"CPU": 1}, {"CPU": 1}], "strategy": "STRICT_SPREAD"}
        gcs.handlers["create_placement_group"](owner, body)
        assert await gcs.handlers["wait_placement_group"](owner, {"pg_id": pg_id, "timeout": 1})
        group = gcs.placement_groups.groups[pg_id]
        lost = group.placement.index(b)
        gcs.node_table.node_died(b, "test")
        await settle()
        info = gcs.handlers["get_placement_group"](owner, {"pg_id": pg_id})
        assert info["state"] == "RESCHEDULING"
        assert info["bundle_nodes"][lost] is None and info["bundle_nodes"][1 - lost] == a.hex()
        assert f"bundles [{lost}] again" in info["reason"]
        assert "lost bundles" in gcs.log.events[-1]["message"]
        # Waiting for it waits for it to be whole again.
        assert not await gcs.handlers["wait_placement_group"](
            owner, {"pg_id": pg_id, "timeout": 0.05}
        )
        c, c_conn = add_node(gcs, cpus=2)
        asked: list = []
        c_conn.replies["reserve_bundles"] = lambda body: asked.append(body["bundles"]) or True
        gcs.placement_groups.on_node_change()
        assert await gcs.handlers["wait_placement_group"](owner, {"pg_id": pg_id, "timeout": 1})
        assert asked == [[(lost, {"CPU": 1})]]
        info = gcs.handlers["get_placement_group"](owner, {"pg_id": pg_id})
        assert info["state"] == "CREATED"
        assert info["bundle_nodes"][lost] == c.hex() and info["bundle_nodes"][1 - lost] == a.hex()
        # Removed while rescheduling: the bundles it kept are released.
        gcs.node_table.node_died(c, "test")
        await settle()
        assert group.state is PgState.RESCHEDULING
        gcs.handlers["remove_placement_group"](owner, {"pg_id": pg_id})
        assert a_conn.ops("release_bundles") == [{"pg_id": pg_id}]

    run(test)


def test_a_node_registering_again_loses_what_this_gcs_does_not_know() -> None:
    """After a GCS restart a raylet registers again with its actor leases and bundles: those
    granted to the old process whose reply (or record) died with it are ended; the ones the
    tables name are kept."""

    async def test() -> None:
        gcs, _, _ = make_gcs()
        a, a_conn = add_node(gcs, cpus=4)
        owner = FakeConn()
        known = spec()
        gcs.handlers["create_actor"](owner, known)
        pg_id = b"k" * 18
        gcs.handlers["create_placement_group"](owner, {"pg_id": pg_id, "bundles": [{"CPU": 1}]})
        await settle()
        actor = gcs.actors.actors[known.actor_id]
        assert actor.state.name == "ALIVE"
        body = {
            "node_id": a,
            "address": "unix:/raylet",
            "resources": {"CPU": 4.0},
            "actor_leases": [
                (actor.lease_id, actor.worker_id, actor.actor_id),
                (99, b"x" * 28, b"unknown-actor-id"),  # granted to a GCS that then died
            ],
            # Bundle 0 of the known group is here; bundle 3 and a whole group are not.
            "bundles": {pg_id: [0, 3], b"g" * 18: [0]},
        }
        gcs.handlers["register_node"](a_conn, body)
        assert a_conn.ops("return_actor_lease") == [{"lease_id": 99, "kill": True}]
        assert a_conn.ops("release_bundles") == [
            {"pg_id": pg_id, "indexes": [3]},
            {"pg_id": b"g" * 18},
        ]

    run(test)


def test_a_group_has_one_placement_attempt_at_a_time() -> None:
    """Changes of capacity while a reservation is in flight do not start a second attempt
    (it would reserve the bundle twice, and its release would free the first's)."""

    async def test() -> None:
        gcs, _, _ = make_gcs()
        a, a_conn = add_node(gcs, cpus=4)
        asked: list = []
        answer = asyncio.get_running_loop().create_future()

        async def reserve(body: dict) -> bool:
            asked.append(body["bundles"])
            return await answer

        a_conn.call = lambda op, body=None, timeout=None: reserve(body)  # type: ignore[method-assign]
        owner = FakeConn()
        pg_id = b"o" * 18
        gcs.handlers["create_placement_group"](owner, {"pg_id": pg_id, "bundles": [{"CPU": 1}]})
        await settle()
        for _ in range(3):
            gcs.placement_groups.on_node_change()
        await settle()
        assert len(asked) == 1
        answer.set_result(True)
        assert await gcs.handlers["wait_placement_group"](owner, {"pg_id": pg_id, "timeout": 1})
        await settle()
        assert len(asked) == 1 and not a_conn.ops("release_bundles")

    run(test)


def test_a_created_group_has_every_bundle_node_in_its_table_entry() -> None:
    """What ``ready()`` waits for (``wait_placement_group``) and what the table reads
    (``get_placement_group``) agree: the moment a group is CREATED, each bundle's node is
    in its entry, through pending, creation, a lost node and rescheduling."""

    async def test() -> None:
        gcs, clock, _ = make_gcs()
        a, _ = add_node(gcs, cpus=8)
        b, _ = add_node(gcs, cpus=8)
        owner = FakeConn()
        seen: list[tuple[str, list]] = []
        ids = [bytes([i]) * 18 for i in range(1, 21)]
        strategies = ["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"]
        for n, pg_id in enumerate(ids):
            body = {"pg_id": pg_id, "bundles": [{"CPU": 0.25}, {"CPU": 0.25}]}
            gcs.handlers["create_placement_group"](owner, body | {"strategy": strategies[n % 4]})

        async def ready_then_read(pg_id: bytes) -> None:
            assert await gcs.handlers["wait_placement_group"](owner, {"pg_id": pg_id})
            info = gcs.handlers["get_placement_group"](owner, {"pg_id": pg_id})
            seen.append((info["state"], info["bundle_nodes"]))

        await asyncio.wait_for(asyncio.gather(*(ready_then_read(p) for p in ids)), 5)
        assert all(state == "CREATED" for state, _ in seen)
        assert all(set(nodes) <= {a.hex(), b.hex()} for _, nodes in seen)
        # b dies: its groups go RESCHEDULING (their lost bundles have no node) and, once a
        # node joins, are CREATED again with every bundle on a live node.
        clock.now += 11
        still = dict(gcs.node_table.nodes[a].available)
        gcs.handlers["heartbeat"](FakeConn(), {"node_id": a, "available": still})
        gcs.node_table.check_heartbeats()
        assert any(g.state is PgState.RESCHEDULING for g in gcs.placement_groups.groups.values())
        for pg_id in ids:
            info = gcs.handlers["get_placement_group"](owner, {"pg_id": pg_id})
            if info["state"] == "CREATED":
                assert None not in info["bundle_nodes"] and b.hex() not in info["bundle_nodes"]
        c, _ = add_node(gcs, cpus=8)
        seen.clear()
        await asyncio.wait_for(asyncio.gather(*(ready_then_read(p) for p in ids)), 5)
        assert all(state == "CREATED" for state, _ in seen)
        assert all(set(nodes) <= {a.hex(), c.hex()} for _, nodes in seen)

    run(test)
