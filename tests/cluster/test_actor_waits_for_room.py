"""An actor whose only node is kept busy by a driver's tasks still gets placed: the driver
reuses its lease task after task, so no heartbeat ever shows the room free; the actor's lease
request waits at the node instead, which asks the driver's lease back (Ray queues an actor at
a raylet the same way; its own test of fate sharing relies on it)."""

from __future__ import annotations

import time

import ember
from ember.util.state import list_actors


def test_an_actor_gets_the_room_a_driver_keeps_reusing_for_its_tasks(cluster):
    cluster.add_node(num_cpus=1, resources={"child": 1})
    cluster.wait_for_nodes()
    ember.init(address=cluster.address)

    @ember.remote(resources={"child": 1})
    def probe() -> int:
        return 1

    @ember.remote(resources={"child": 1})
    class Child:
        def ready(self) -> bool:
            return True

    assert ember.get(probe.remote(), timeout=60) == 1  # the driver holds the node's room
    child = Child.remote()
    asked = time.monotonic()
    ran = 0
    deadline = asked + 30
    waited = None
    while time.monotonic() < deadline:
        ref = probe.remote()
        ready, _ = ember.wait([ref], timeout=2)
        if not ready:  # the actor has the room now: the driver's task waits for it
            waited = ref
            break
        ran += 1
    took = time.monotonic() - asked
    assert waited is not None, f"the actor never got the room: {ran} tasks ran meanwhile"
    # The driver's lease comes back after the task it runs: the actor is placed at once.
    assert took < 8, f"the actor waited {took:.1f} s while {ran} tasks ran"
    assert ember.get(child.ready.remote(), timeout=30) is True
    states = {a.class_name: a.state for a in list_actors()}
    assert states.get("Child") == "ALIVE", states
    ember.kill(child)
    assert ember.get(waited, timeout=60) == 1, "the task that waited runs once the room is back"
