"""The GCS's actor lifecycle core, driven without processes, sockets or an event loop."""

from __future__ import annotations

import pytest
from ember.core_worker.task_spec import ACTOR_CREATION_TASK, TaskSpec
from ember.gcs.actor_machine import (
    ACTOR_LIFECYCLE,
    PLACE,
    PUBLISH,
    PUSH_CREATION,
    RELEASE_NAME,
    ActorInfo,
    ActorMachine,
    ActorState,
    ConstructorRaised,
    CreationFailed,
    CreationSucceeded,
    Exited,
    ExitWorker,
    JobEnded,
    Kill,
    KillWorker,
    LeaseFailed,
    LeaseGranted,
    NodeDied,
    Record,
    Registered,
    ReturnLease,
    Unschedulable,
    WorkerDied,
)
from ember.lifecycle import TransitionError

NODE = b"n" * 28


def actor(n: int = 1, **options) -> ActorInfo:
    options.setdefault("class_name", "Counter")
    spec = TaskSpec(
        task_id=bytes([n]) * 24,
        kind=ACTOR_CREATION_TASK,
        actor_id=bytes([n]) * 16,
        job_id=b"job1",
        owner=(b"w" * 28, "unix:/owner", NODE),
        resources={"CPU": 1.0},
        actor_options=options,
    )
    return ActorInfo(spec)


def grant(worker: int = 1) -> dict:
    return {
        "lease_id": worker,
        "worker_id": bytes([worker]) * 28,
        "address": f"unix:/w{worker}",
        "pid": 1000 + worker,
    }


@pytest.fixture
def machine() -> ActorMachine:
    return ActorMachine(clock=lambda: 1234.5)


def bring_up(m: ActorMachine, a: ActorInfo, worker: int = 1) -> list:
    """Leases ``worker`` and runs the constructor there successfully."""
    assert m.handle(a, LeaseGranted(NODE, grant(worker))) == [PUSH_CREATION]
    return m.handle(a, CreationSucceeded(f"unix:/w{worker}"))


def test_registered_then_alive(machine: ActorMachine) -> None:
    a = actor()
    assert a.state is ActorState.PENDING_CREATION and a.wants_worker
    assert machine.handle(a, Registered()) == [PLACE]
    assert machine.handle(a, LeaseGranted(NODE, grant(7))) == [PUSH_CREATION]
    assert (a.worker_id, a.node_id, a.pid, a.lease_id) == (bytes([7]) * 28, NODE, 1007, 7)
    assert machine.handle(a, CreationSucceeded("unix:/w7")) == [PUBLISH]
    assert a.state is ActorState.ALIVE and a.address == "unix:/w7"
    # Replies carry the state as the plain string the dashboard and CLI read.
    assert a.public()["state"] == "ALIVE"


def test_a_failed_lease_request_is_retried_while_the_actor_wants_a_worker(
    machine: ActorMachine,
) -> None:
    a = actor()
    assert machine.handle(a, LeaseFailed()) == [PLACE]
    machine.handle(a, Kill("bye", graceful=False, restart=False, worker_connected=False))
    assert machine.handle(a, LeaseFailed()) == []


def test_an_unschedulable_actor_dies_at_once_and_says_so(machine: ActorMachine) -> None:
    a = actor(max_restarts=5)
    out = machine.handle(a, Unschedulable("node abab is not alive"))
    assert PUBLISH in out and RELEASE_NAME in out
    assert a.state is ActorState.DEAD and a.no_restart
    public = a.public()
    assert public["unschedulable"] is True and public["death_cause"] == "node abab is not alive"
    # What the GCS stores keeps it, so a restarted GCS still answers the same.
    assert ActorInfo.from_record(a.record()).public()["unschedulable"] is True
    assert machine.handle(a, Unschedulable("again")) == []


def test_a_lease_granted_after_the_actor_died_goes_back(machine: ActorMachine) -> None:
    a = actor()
    machine.handle(a, Kill("bye", graceful=False, restart=False, worker_connected=False))
    assert machine.handle(a, LeaseGranted(NODE, grant(3))) == [ReturnLease(3)]
    assert a.worker_id is None


def test_worker_death_with_restarts_left_restarts_then_alive(machine: ActorMachine) -> None:
    a = actor(max_restarts=2)
    bring_up(machine, a)
    out = machine.handle(a, WorkerDied("its worker process died", job_running=True))
    assert out[1:] == [PUBLISH, PLACE]
    assert isinstance(out[0], Record) and out[0].severity == "WARNING"
    assert a.state is ActorState.RESTARTING and a.num_restarts == 1 and a.address is None
    assert a.death_cause == "its worker process died"
    # A RESTARTING actor's old worker reporting again changes nothing.
    assert machine.handle(a, WorkerDied("late report", job_running=True)) == []
    assert bring_up(machine, a, worker=2) == [PUBLISH]
    assert a.state is ActorState.ALIVE and a.num_restarts == 1 and a.address == "unix:/w2"
    # Its first life is listed, where it ran and why it ended; the constructor's second run
    # is the creation task's attempt 1 (its task events: a row of its own).
    first = {
        "node_id": NODE,
        "pid": 1001,
        "worker_id": bytes([1]) * 28,
        "start_time": 1234.5,
        "end_time": 1234.5,
        "death_cause": "its worker process died",
    }
    assert a.public()["incarnations"] == [first] and a.spec.attempt == 1
    assert (a.pid, a.worker_id) == (1002, bytes([2]) * 28)
    assert ActorInfo.from_record(a.record()).incarnations == [first]  # stored with it


def test_restarts_exhausted_is_dead_with_its_cause(machine: ActorMachine) -> None:
    a = actor(max_restarts=1)
    bring_up(machine, a)
    machine.handle(a, WorkerDied("crash 1", job_running=True))
    bring_up(machine, a, worker=2)
    out = machine.handle(a, WorkerDied("crash 2", job_running=True))
    assert out[0] == RELEASE_NAME and out[-1] == PUBLISH
    assert a.state is ActorState.DEAD and a.end_time == 1234.5
    assert a.death_cause == "crash 2 (restarted 1 of max_restarts=1 times)"
    assert a.public()["state"] == "DEAD"


def test_no_restarts_configured_dies_on_first_failure(machine: ActorMachine) -> None:
    a = actor()
    bring_up(machine, a)
    machine.handle(a, WorkerDied("segfault", job_running=True))
    assert a.state is ActorState.DEAD and a.death_cause == "segfault"


def test_infinite_restarts(machine: ActorMachine) -> None:
    a = actor(max_restarts=-1)
    for i in range(50):
        bring_up(machine, a, worker=i + 1)
        machine.handle(a, WorkerDied("crash", job_running=True))
        assert a.state is ActorState.RESTARTING
    assert a.num_restarts == 50


def test_creation_failure_during_a_restart_counts_as_another_restart(
    machine: ActorMachine,
) -> None:
    a = actor(max_restarts=2)
    bring_up(machine, a)
    machine.handle(a, WorkerDied("crash", job_running=True))
    machine.handle(a, LeaseGranted(NODE, grant(2)))
    machine.handle(a, CreationFailed("its worker died during creation: EOF", job_running=True))
    assert a.state is ActorState.RESTARTING and a.num_restarts == 2
    machine.handle(a, LeaseGranted(NODE, grant(3)))
    machine.handle(a, CreationFailed("its worker died during creation: EOF", job_running=True))
    assert a.state is ActorState.DEAD
    assert a.death_cause.endswith("(restarted 2 of max_restarts=2 times)")


def test_node_death_restarts_or_kills_its_actors(machine: ActorMachine) -> None:
    restartable, fragile = actor(1, max_restarts=1), actor(2)
    for a in (restartable, fragile):
        bring_up(machine, a)
        machine.handle(a, NodeDied("its node nnnn died (no heartbeat)", job_running=True))
    assert restartable.state is ActorState.RESTARTING
    assert fragile.state is ActorState.DEAD
    assert fragile.death_cause == "its node nnnn died (no heartbeat)"


def test_kill_with_no_restart_is_dead_at_once(machine: ActorMachine) -> None:
    a = actor(max_restarts=5)
    bring_up(machine, a)
    out = machine.handle(a, Kill("killed by ember.kill()", False, False, worker_connected=True))
    assert out[:2] == [
        ExitWorker("killed by ember.kill()", force=True),
        KillWorker("killed by ember.kill()"),
    ]
    assert RELEASE_NAME in out and out[-1] == PUBLISH
    assert a.state is ActorState.DEAD and a.death_cause == "killed by ember.kill()"
    # The worker's death, reported afterwards, changes nothing.
    assert machine.handle(a, WorkerDied("killed", job_running=True)) == []
    assert a.num_restarts == 0


def test_kill_with_restart_restarts_when_the_worker_dies(machine: ActorMachine) -> None:
    a = actor(max_restarts=1)
    bring_up(machine, a)
    out = machine.handle(a, Kill("restart me", False, restart=True, worker_connected=True))
    assert out == [ExitWorker("restart me", force=True), KillWorker("restart me")]
    assert a.state is ActorState.ALIVE  # until its worker's death is reported
    machine.handle(a, WorkerDied("killed", job_running=True))
    assert a.state is ActorState.RESTARTING


def test_graceful_kill_waits_for_the_actor_to_exit(machine: ActorMachine) -> None:
    a = actor(max_restarts=3)
    bring_up(machine, a)
    out = machine.handle(a, Kill("drain", graceful=True, restart=False, worker_connected=True))
    assert out == [ExitWorker("drain", force=False)]
    assert a.state is ActorState.ALIVE
    # Its worker exiting is the exit it was told to do: the kill's reason is the cause.
    machine.handle(a, WorkerDied("exit code 0", job_running=True))
    assert a.state is ActorState.DEAD and a.death_cause.startswith("drain")


def test_exit_reported_is_dead_for_good(machine: ActorMachine) -> None:
    a = actor(max_restarts=-1)
    bring_up(machine, a)
    machine.handle(a, Exited("exit_actor() was called"))
    assert a.state is ActorState.DEAD and a.death_cause == "exit_actor() was called"
    assert machine.handle(a, Exited("again")) == []


def test_constructor_error_is_final(machine: ActorMachine) -> None:
    a = actor(max_restarts=-1)
    machine.handle(a, LeaseGranted(NODE, grant()))
    out = machine.handle(a, ConstructorRaised("the constructor raised:\nValueError"))
    assert out[-1] == ExitWorker("constructor failed", force=False)
    assert a.state is ActorState.DEAD and a.no_restart


def test_non_detached_actors_die_with_their_job_detached_ones_do_not(
    machine: ActorMachine,
) -> None:
    plain, detached = actor(1, max_restarts=-1), actor(2, detached=True)
    for a in (plain, detached):
        bring_up(machine, a)
    assert machine.handle(detached, JobEnded("its job ended (the driver exited)")) == []
    machine.handle(plain, JobEnded("its job ended (the driver exited)"))
    assert plain.state is ActorState.DEAD
    assert plain.death_cause == "its job ended (the driver exited)"
    assert detached.state is ActorState.ALIVE
    # Once its job is gone, a non-detached actor that fails does not restart...
    orphan = actor(3, max_restarts=-1)
    bring_up(machine, orphan)
    machine.handle(orphan, WorkerDied("crash", job_running=False))
    assert orphan.state is ActorState.DEAD
    # ...but a detached one does.
    machine.handle(detached, WorkerDied("crash", job_running=False))
    assert detached.state is ActorState.DEAD  # max_restarts=0
    survivor = actor(4, detached=True, max_restarts=1)
    bring_up(machine, survivor)
    machine.handle(survivor, WorkerDied("crash", job_running=False))
    assert survivor.state is ActorState.RESTARTING


def test_killed_during_creation_stays_dead(machine: ActorMachine) -> None:
    a = actor(max_restarts=3)
    machine.handle(a, LeaseGranted(NODE, grant()))
    machine.handle(a, Kill("bye", graceful=False, restart=False, worker_connected=True))
    assert machine.handle(a, CreationSucceeded("unix:/w1")) == []
    assert machine.handle(a, CreationFailed("EOF", job_running=True)) == []
    assert a.state is ActorState.DEAD and a.num_restarts == 0


def test_undeclared_transitions_raise_with_history(machine: ActorMachine) -> None:
    a = actor()
    bring_up(machine, a)
    with pytest.raises(TransitionError) as info:
        machine.handle(a, CreationSucceeded("unix:/again"))  # ALIVE cannot be created again
    assert info.value.state is ActorState.ALIVE
    assert [e for e, _ in info.value.history] == ["created", "lease_granted", "created"]
    machine.handle(a, Kill("bye", graceful=False, restart=False, worker_connected=False))
    with pytest.raises(TransitionError) as info:
        machine.handle(a, Kill("twice", graceful=False, restart=False, worker_connected=False))
    assert "killed:DEAD" in str(info.value)


def test_the_table() -> None:
    assert ACTOR_LIFECYCLE.terminal() == {ActorState.DEAD}
    # The enum's names are the strings GCS replies have always carried.
    assert [s.name for s in ActorState] == [
        "DEPENDENCIES_UNREADY",
        "PENDING_CREATION",
        "ALIVE",
        "RESTARTING",
        "DEAD",
    ]
    for state in (ActorState.PENDING_CREATION, ActorState.ALIVE, ActorState.RESTARTING):
        for edge in ("failed", "killed", "job_ended", "exited"):
            assert ACTOR_LIFECYCLE.allows(state, edge), (state, edge)
