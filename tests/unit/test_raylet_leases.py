"""The raylet's lease machine (``ember.raylet.lease_machine``) driven by plain events: no
processes, no sockets, a fake clock."""

from __future__ import annotations

from typing import Any

import pytest
from ember.lifecycle import TransitionError
from ember.raylet.cluster_view import ClusterView
from ember.raylet.lease_events import (
    ActorWorkerDied,
    AskLeasesBack,
    AskMayExit,
    BacklogReported,
    Cancel,
    CheckAnswered,
    ClientGone,
    Grant,
    JobFinished,
    KillRequested,
    KillWorker,
    LeaseEnded,
    LeaseRequested,
    LeaseReturned,
    NodeDeclaredDead,
    RefreshView,
    RequestWithdrawn,
    RetireWorker,
    ShuttingDown,
    Spillback,
    StartFailed,
    StartWorkers,
    Tick,
    Unschedulable,
    ViewRefreshed,
    WarnInfeasible,
    WorkerBlocked,
    WorkerNotStarted,
    WorkerRegistered,
    WorkersExited,
    WorkerStarted,
    WorkerUnblocked,
)
from ember.raylet.lease_machine import LeaseMachine
from ember.raylet.lease_records import WORKER_LIFECYCLE, Request, Worker
from ember.raylet.lease_records import WorkerState as S
from ember.resources import NodeResources

HERE = b"here"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(resources: dict | None = None, view: list[dict] | None = None) -> LeaseMachine:
    cluster = ClusterView()
    cluster.replace(view or [], HERE)
    return LeaseMachine(
        HERE,
        NodeResources(resources or {"CPU": 2}),
        cluster,
        clock=Clock(),
        can_refresh_view=lambda: True,
    )


_ids = iter(range(1, 1_000_000))


def workers(m: LeaseMachine, n: int) -> list[Worker]:
    """``n`` workers started and registered: idle."""
    ws = []
    for _ in range(n):
        w = Worker(next(_ids).to_bytes(4, "big"), m.clock())
        assert m.handle(WorkerStarted(w)) == []
        m.handle(WorkerRegistered(w))
        ws.append(w)
    return ws


def request(shape: dict | None = None, client: Any = "holder", **kw: Any) -> Request:
    strategy, job_id = kw.pop("strategy", None), kw.pop("job_id", b"job1")
    return Request(object(), shape or {"CPU": 1}, strategy, client, job_id, "f", **kw)


def ask(m: LeaseMachine, req: Request) -> list:
    return m.handle(LeaseRequested(req))


def only(out: list, kind: type) -> Any:
    assert len(out) == 1 and type(out[0]) is kind, out
    return out[0]


def test_grant_return_and_reuse() -> None:
    m = make()
    (w,) = workers(m, 1)
    req = request()
    grant = only(ask(m, req), Grant)
    assert grant.request is req and grant.lease.worker is w
    assert w.state is S.LEASED and w.lease_id == grant.lease.lease_id
    assert m.resources.available_dict() == {"CPU": 1.0}
    assert m.handle(LeaseReturned(grant.lease.lease_id)) == []
    assert w.state is S.IDLE and w.tasks_run == 1 and m.idle == [w]
    assert m.resources.available_dict() == {"CPU": 2.0}
    again = only(ask(m, request()), Grant)
    assert again.lease.worker is w and again.lease.lease_id != grant.lease.lease_id


def test_gpu_work_and_cpu_work_never_share_a_worker() -> None:
    # Ray's isolation: what a GPU task leaves in its process (a CUDA context, GPU memory)
    # must not follow a CPU task there, nor the other way round.
    m = make({"CPU": 2, "GPU": 1})
    (w,) = workers(m, 1)
    cpu = only(ask(m, request()), Grant)
    assert m.handle(LeaseReturned(cpu.lease.lease_id)) == []
    out = ask(m, request({"CPU": 1, "GPU": 1}))
    assert [type(i).__name__ for i in out] == ["StartWorkers"], out  # not the idle CPU one
    g = Worker(next(_ids).to_bytes(4, "big"), m.clock())
    m.handle(WorkerStarted(g))
    gpu = only(m.handle(WorkerRegistered(g)), Grant)
    assert gpu.lease.worker is g
    assert m.handle(LeaseReturned(gpu.lease.lease_id)) == []
    assert only(ask(m, request()), Grant).lease.worker is w  # the CPU task: the CPU worker
    assert only(ask(m, request({"GPU": 1})), Grant).lease.worker is g


def test_idle_for_counts_from_the_last_lease_end_and_is_none_while_work_is_held() -> None:
    m = make({"CPU": 1})
    (w,) = workers(m, 1)
    m.clock.now += 3.0
    assert m.idle_for() == 3.0  # never leased: idle since the machine began
    lease = only(ask(m, request()), Grant).lease
    m.clock.now += 5.0
    assert m.idle_for() is None  # a lease held
    ask(m, request())  # waits for the CPU
    m.handle(LeaseReturned(lease.lease_id))  # the CPU goes to the waiting request
    assert m.idle_for() is None
    m.handle(LeaseReturned(next(iter(m.leases))))
    m.clock.now += 2.5
    assert m.idle_for() == 2.5  # from the last lease's end, not the first's


def test_a_request_waiting_for_cpus_asks_other_holders_for_their_leases_once() -> None:
    m = make({"CPU": 2})
    workers(m, 3)
    a1 = only(ask(m, request(client="a")), Grant).lease
    a2 = only(ask(m, request(client="a")), Grant).lease
    # The holder's own next request waits: its own queue reuses its leases, nothing asked.
    assert ask(m, request(client="a")) == []
    # Another client's request asks for both of a's leases, once.
    asked = only(ask(m, request(client="b")), AskLeasesBack)
    assert sorted(lease.lease_id for lease in asked.leases) == sorted([a1.lease_id, a2.lease_id])
    assert ask(m, request(client="c")) == []
    # The CPU a1 gave back goes to the first in line (a's); b and c still wait, so the new
    # lease is asked for at once.
    grant, asked = m.handle(LeaseReturned(a1.lease_id))
    assert type(grant) is Grant and grant.request.client == "a"
    assert type(asked) is AskLeasesBack and asked.leases == [grant.lease]
    assert ask(m, request(client="d")) == []


def test_a_request_with_no_idle_worker_starts_one_and_waits_for_it() -> None:
    m = make()
    assert only(ask(m, request()), StartWorkers).count == 1
    assert m.starting == 1
    # A second request needs a second worker: one is already on its way.
    assert only(ask(m, request()), StartWorkers).count == 1
    w = Worker(b"w-new", 0.0)  # the shell's process for the first start
    grant = only(m.handle(WorkerRegistered(w)), Grant)
    assert grant.lease.worker is w and len(m.queue) == 1 and m.starting == 1
    # A start that failed before any process existed is counted back, and asked for again.
    assert m.handle(WorkerNotStarted()) == [] and m.starting == 0
    assert only(m.handle(WorkersExited([])), StartWorkers).count == 1  # the reaper's pass


def test_requests_queue_in_order_until_resources_free_up() -> None:
    m = make({"CPU": 1})
    workers(m, 2)
    first, second, third = request(), request(), request()
    lease = only(ask(m, first), Grant).lease
    assert ask(m, second) == [] and ask(m, third) == []
    assert m.queue == [second, third]
    grant = only(m.handle(LeaseReturned(lease.lease_id)), Grant)
    assert grant.request is second and m.queue == [third]


def test_a_blocked_worker_lends_its_cpu_until_it_unblocks() -> None:
    m = make({"CPU": 1})
    w, _ = workers(m, 2)
    only(ask(m, request()), Grant)
    waiting = request()
    assert ask(m, waiting) == []
    leased = next(x for x in (w, _) if x.state is S.LEASED)
    grant = only(m.handle(WorkerBlocked(leased)), Grant)
    assert grant.request is waiting and leased.blocked
    assert m.handle(WorkerUnblocked(leased)) == []
    assert not leased.blocked
    assert m.resources.available_dict() == {"CPU": -1.0}  # oversubscribed for a moment


def test_a_blocked_worker_in_a_placement_group_lends_its_bundles_cpu() -> None:
    # A parent in a 1-CPU bundle waits on the child it captured into the group: the child
    # fits only in the bundle's CPU, which the parent lends while it waits.
    group = "ab" * 14
    bundle = {"CPU_group_" + group: 1.0, "CPU_group_0_" + group: 1.0, "bundle_group_" + group: 1.0}
    m = make({"CPU": 1, **bundle})
    w, _ = workers(m, 2)
    shape = {"CPU_group_" + group: 1.0, "bundle_group_" + group: 0.001}
    only(ask(m, request(dict(shape))), Grant)
    child = request(dict(shape))
    assert ask(m, child) == []
    parent = next(x for x in (w, _) if x.state is S.LEASED)
    grant = only(m.handle(WorkerBlocked(parent)), Grant)
    assert grant.request is child and parent.blocked
    assert m.handle(WorkerUnblocked(parent)) == []
    assert m.resources.available_dict()["CPU_group_" + group] == -1.0
    assert m.resources.available_dict()["CPU"] == 1.0, "the node's own CPU was never lent"


def test_workers_start_only_for_requests_that_would_be_granted() -> None:
    """Ten queued one-CPU requests on a two-CPU node need two workers, not ten: the
    others could not be granted a worker if one were there (blocked tasks once
    multiplied processes this way)."""
    m = make({"CPU": 2})
    started = 0
    for _ in range(10):
        started += sum(o.count for o in ask(m, request()) if isinstance(o, StartWorkers))
    assert started == 2 and m.starting == 2


def test_deeper_requests_are_served_first() -> None:
    """A child of a running task (deeper) goes before a sibling of its parent, in arrival
    order within one depth, so a tree of blocking tasks runs depth-first."""
    m = make({"CPU": 1})
    workers(m, 3)
    parent = only(ask(m, request()), Grant).lease.worker
    assert parent.depth == 1
    shallow = [request(depth=1), request(depth=1)]
    deep = [request(depth=2), request(depth=2)]
    for r in (shallow[0], deep[0], shallow[1], deep[1]):
        assert ask(m, r) == []
    assert m.queue == deep + shallow
    grant = only(m.handle(WorkerBlocked(parent)), Grant)  # the parent waits on its child
    assert grant.request is deep[0] and grant.lease.worker.depth == 2


def test_worker_death_while_leased_frees_its_lease() -> None:
    m = make()
    (w,) = workers(m, 1)
    lease = only(ask(m, request()), Grant).lease
    out = m.handle(WorkersExited([w]))
    assert out == []  # a task's holder sees its worker's connection drop
    assert w.state is S.DEAD and lease.lease_id not in m.leases
    assert m.resources.available_dict() == {"CPU": 2.0}
    # The holder's late return (worker_died) finds nothing to end.
    assert m.handle(LeaseEnded(lease.lease_id, "its holder lost it", 0.5)) == []


def test_actor_worker_death_is_told_to_the_gcs() -> None:
    m = make()
    (w,) = workers(m, 1)
    grant = only(ask(m, request(client=None, actor_id=b"actor1")), Grant)
    assert w.state is S.ACTOR and w.actor_id == b"actor1" and grant.lease.is_actor
    out = m.handle(WorkersExited([w]))
    assert [type(i) for i in out] == [ActorWorkerDied] and out[0].worker is w
    assert m.resources.available_dict() == {"CPU": 2.0}


def test_an_actor_worker_is_never_reused() -> None:
    m = make()
    (w,) = workers(m, 1)
    lease = only(ask(m, request(client=None, actor_id=b"a")), Grant).lease
    kill = only(m.handle(LeaseReturned(lease.lease_id, "actor lease returned")), KillWorker)
    assert kill.worker is w and kill.reason == "actor lease returned"
    assert w.state is S.EXITING and m.idle == []
    assert m.handle(WorkersExited([w])) == [ActorWorkerDied(w)]


def test_lease_lost_by_its_holder_kills_the_worker_after_a_grace() -> None:
    m = make()
    (w,) = workers(m, 1)
    lease = only(ask(m, request()), Grant).lease
    kill = only(m.handle(LeaseEnded(lease.lease_id, "its holder lost it", 0.5)), KillWorker)
    assert (kill.worker, kill.reason, kill.grace) == (w, "its holder lost it", 0.5)
    assert w.state is S.EXITING and m.idle == []


def test_idle_retirement_asks_the_worker_first() -> None:
    m = make({"CPU": 1})
    old, older, newest = workers(m, 3)
    m.clock.now += 30
    out = m.handle(Tick(idle_after=10, warn_after=0.5))
    # One worker per CPU stays; the others are asked whether they own objects in use.
    assert [type(i) for i in out] == [AskMayExit, AskMayExit]
    asked = [i.worker for i in out]
    assert asked == [old, older] and m.idle == [newest]
    assert old.state is S.CHECKING and older.state is S.CHECKING
    # "Yes": retired. "No": back to the pool, idle from now.
    assert only(m.handle(CheckAnswered(old, True)), RetireWorker).worker is old
    assert old.state is S.EXITING
    assert m.handle(CheckAnswered(older, False)) == []
    assert older.state is S.IDLE and older in m.idle and older.idle_since == m.clock.now


def test_idle_workers_within_the_cpu_count_stay() -> None:
    m = make({"CPU": 2})
    workers(m, 2)
    m.clock.now += 1000
    assert m.handle(Tick(idle_after=10, warn_after=0.5)) == []


def test_a_worker_that_dies_while_checked_is_not_taken_back() -> None:
    m = make({"CPU": 1})
    a, _ = workers(m, 2)
    m.clock.now += 30
    only(m.handle(Tick(idle_after=10, warn_after=0.5)), AskMayExit)
    m.handle(WorkersExited([a]))
    assert m.handle(CheckAnswered(a, False)) == [] and a.state is S.DEAD and a not in m.idle


def test_start_failure_starts_another() -> None:
    m = make()
    assert only(ask(m, request()), StartWorkers).count == 1
    w = Worker(b"w-bad", 0.0)
    out = m.handle(WorkersExited([w]))
    assert [type(i) for i in out] == [StartFailed, StartWorkers]
    assert w.state is S.DEAD and m.starting == 1  # the replacement


def test_a_worker_killed_while_starting_is_never_leased() -> None:
    m = make()
    only(ask(m, request()), StartWorkers)
    w = Worker(b"w-k", 0.0)
    assert only(m.handle(KillRequested(w, "killed")), KillWorker).worker is w
    assert m.starting == 0
    assert m.handle(WorkerRegistered(w)) == []
    assert w.state is S.EXITING and m.idle == []


def test_a_holder_that_dies_loses_its_requests_and_leases() -> None:
    m = make({"CPU": 1})
    (w,) = workers(m, 1)
    lease = only(ask(m, request(client="gone")), Grant).lease
    waiting = request(client="gone")
    other = request(client="other")
    ask(m, waiting)
    ask(m, other)
    out = m.handle(ClientGone("gone"))
    assert [type(i) for i in out] == [Cancel, KillWorker, StartWorkers]
    assert out[0].request is waiting and out[1].worker is w
    assert lease.lease_id not in m.leases and m.queue == [other]


def test_a_withdrawn_request_leaves_the_queue_and_its_neighbours_stay() -> None:
    m = make({"CPU": 1})
    (w,) = workers(m, 1)
    only(ask(m, request(client="c", request_id=1)), Grant)  # the CPU is taken
    second = request(client="c", request_id=2)
    third = request(client="c", request_id=3)
    theirs = request(client="other", request_id=3)
    for req in (second, third, theirs):
        assert not any(isinstance(i, (Grant, StartWorkers)) for i in ask(m, req))
    assert only(m.handle(RequestWithdrawn("c", 3)), Cancel).request is third
    assert m.queue == [second, theirs]  # the other client's request of the same number stays
    assert m.handle(RequestWithdrawn("c", 3)) == []  # gone already: nothing
    assert m.handle(RequestWithdrawn("c", 9)) == []  # granted or never here: nothing
    assert [d["count"] for d in m.pending_demands()] == [2]


def test_owners_backlogs_count_as_demand_until_they_end_or_the_owner_goes() -> None:
    m = make({"CPU": 1})
    ask(m, request({"CPU": 4}, client="c"))  # one request out; 30 more tasks held back
    assert m.handle(BacklogReported("c", 7, {"CPU": 4.0}, 30)) == []
    m.handle(BacklogReported("d", 7, {"CPU": 4.0}, 5))  # another owner's, same key
    m.handle(BacklogReported("c", 8, {"GPU": 1.0}, 2))
    rows = {tuple(d["shape"]): (d["count"], d["infeasible"]) for d in m.pending_demands()}
    assert rows == {("CPU",): (36, True), ("GPU",): (2, True)}
    m.handle(BacklogReported("c", 8, {"GPU": 1.0}, 0))  # 0 ends it
    m.handle(ClientGone("c"))  # its request and its backlog go with it
    assert [(d["shape"], d["count"]) for d in m.pending_demands()] == [({"CPU": 4.0}, 5)]


def test_actor_leases_outlive_their_requesters_connection() -> None:
    m = make()
    workers(m, 1)
    only(ask(m, request(client=None, actor_id=b"a")), Grant)
    assert m.handle(ClientGone(None)) == []
    assert len(m.leases) == 1


def test_a_finished_job_loses_its_task_leases() -> None:
    m = make()
    w, _ = workers(m, 2)
    task = only(ask(m, request()), Grant).lease
    only(ask(m, request(client=None, actor_id=b"a")), Grant)
    out = m.handle(JobFinished(b"job1"))
    assert [type(i) for i in out] == [KillWorker] and out[0].worker is task.worker
    assert list(m.leases.values())[0].is_actor


def test_spillback_to_a_node_with_room() -> None:
    other = {"node_id": b"a", "total": {"CPU": 4}, "available": {"CPU": 4}, "tcp_address": "t:a"}
    m = make({"CPU": 1}, [other])
    workers(m, 1)
    only(ask(m, request()), Grant)
    spill = only(ask(m, request()), Spillback)
    assert (spill.node_id, spill.address) == (b"a", "t:a")
    assert other["available"]["CPU"] == 3  # counted as taken until the next view
    assert m.queue == []


def test_spread_rotates_here_and_there() -> None:
    other = {"node_id": b"a", "total": {"CPU": 4}, "available": {"CPU": 4}, "tcp_address": "t:a"}
    m = make({"CPU": 4}, [other])
    workers(m, 4)
    kinds = [type(ask(m, request(strategy="SPREAD"))[0]) for _ in range(4)]
    assert kinds == [Grant, Spillback, Grant, Spillback]


def test_hard_affinity_to_a_dead_node_asks_for_a_fresh_view_then_fails() -> None:
    m = make()
    workers(m, 1)
    req = request(strategy=("NODE_AFFINITY", b"gone", False))
    only(ask(m, req), RefreshView)
    assert ask(m, request(strategy=("NODE_AFFINITY", b"gone", False))) == [RefreshView()]
    assert len(m.queue) == 2  # held until the view arrives
    out = m.handle(ViewRefreshed())
    assert [type(i) for i in out] == [Unschedulable, Unschedulable]
    assert "is not alive" in out[0].message and m.queue == []


def test_an_infeasible_request_warns_once_and_stays() -> None:
    m = make({"CPU": 2})
    workers(m, 1)
    req = request({"GPU": 1})
    warn = only(ask(m, req), WarnInfeasible)
    assert "requires {GPU: 1}" in warn.message and "task f" in warn.message
    assert ask(m, request()) != [] and m.queue == [req]
    m.clock.now += 10
    assert m.handle(Tick(idle_after=10, warn_after=0.5)) == []  # told once


def test_in_a_cluster_the_warning_waits_for_the_tick() -> None:
    m = make({"CPU": 2})
    m.in_cluster = True
    req = request({"GPU": 1})
    assert ask(m, req) == []
    assert m.handle(Tick(idle_after=10, warn_after=1.5)) == []  # too soon
    m.clock.now += 2
    assert only(m.handle(Tick(idle_after=10, warn_after=1.5)), WarnInfeasible).request is req


def test_custom_resources_wait_for_capacity() -> None:
    m = make({"CPU": 2, "accel": 1})
    workers(m, 2)
    only(ask(m, request({"accel": 1})), Grant)
    assert ask(m, request({"accel": 1})) == []
    assert m.pending_demands() == [{"shape": {"accel": 1}, "count": 1, "infeasible": False}]


def test_node_declared_dead_kills_its_work() -> None:
    m = make()
    a, b = workers(m, 2)
    only(ask(m, request()), Grant)
    out = m.handle(NodeDeclaredDead(b"new-id"))
    assert sorted(type(i).__name__ for i in out) == ["KillWorker", "KillWorker"]
    assert {i.worker for i in out} == {a, b}
    assert m.leases == {} and m.idle == [] and m.node_id == b"new-id"
    assert m.resources.available_dict() == {"CPU": 2.0}


def test_nothing_is_granted_while_shutting_down() -> None:
    m = make()
    workers(m, 1)
    m.handle(ShuttingDown())
    assert ask(m, request()) == []


def test_an_undeclared_move_raises_with_the_workers_history() -> None:
    m = make()
    (w,) = workers(m, 1)
    with pytest.raises(TransitionError) as info:
        m.handle(WorkerRegistered(w))  # registered twice
    assert info.value.state is S.IDLE
    assert [e for e, _ in info.value.history] == ["created", "registered"]


def test_the_table_names_every_state() -> None:
    assert set(WORKER_LIFECYCLE.table) | WORKER_LIFECYCLE.terminal() == set(S)
    assert WORKER_LIFECYCLE.terminal() == {S.DEAD}
    # Every live worker can die and be killed.
    for state, moves in WORKER_LIFECYCLE.table.items():
        assert "kill" in moves, state
        assert "died" in moves or "start_failed" in moves, state


def test_a_burst_of_leases_starts_workers_a_few_at_a_time() -> None:
    """1,000 actor leases at once must not spawn 1,000 workers at once: at most
    ``max_starting`` are on their way; each registration lets the next start."""
    m = LeaseMachine(
        HERE,
        NodeResources({"CPU": 2}),
        ClusterView(),
        clock=Clock(),
        max_starting=4,
    )
    started = 0
    for i in range(50):
        out = ask(m, request({"CPU": 0}, actor_id=i.to_bytes(4, "big")))
        started += sum(o.count for o in out if isinstance(o, StartWorkers))
    assert started == 4 and m.starting == 4
    # One registers: it takes a lease, and one more starts in its place.
    w = Worker(b"w-01", m.clock())  # one of the four asked for (STARTING)
    out = m.handle(WorkerRegistered(w))
    assert [type(o) for o in out].count(Grant) == 1
    assert sum(o.count for o in out if isinstance(o, StartWorkers)) == 1


def test_a_registration_does_not_rescan_a_long_queue() -> None:
    """With thousands of actor leases queued on a lone node and every start slot taken, a
    worker's registration looks at a few requests, not all of them (each registration once
    scanned the whole queue: quadratic in the number of actors)."""
    m = LeaseMachine(HERE, NodeResources({"CPU": 2}), ClusterView(), clock=Clock(), max_starting=4)
    for i in range(2000):
        ask(m, request({"CPU": 0}, actor_id=i.to_bytes(4, "big")))
    looked = []
    can_fit = m.resources.can_fit
    m.resources.can_fit = lambda shape: looked.append(shape) or can_fit(shape)  # type: ignore[method-assign]
    out = m.handle(WorkerRegistered(Worker(b"w-01", m.clock())))
    assert [type(o) for o in out].count(Grant) == 1
    assert sum(o.count for o in out if isinstance(o, StartWorkers)) == 1
    assert len(looked) <= 1 + 4, len(looked)
    assert len(m.queue) == 1999


def test_a_worker_runs_one_jobs_tasks_and_goes_when_its_job_finishes() -> None:
    # Ray's isolation: a second driver's tasks never run in a worker the first one's used.
    m = make({"CPU": 2})
    (w,) = workers(m, 1)
    first = only(ask(m, request(job_id=b"job-one1")), Grant).lease
    assert first.worker is w
    m.handle(LeaseReturned(first.lease_id))
    assert only(ask(m, request(job_id=b"job-two2")), StartWorkers).count == 1
    assert only(ask(m, request(job_id=b"job-one1")), Grant).lease.worker is w
    m.handle(LeaseReturned(w.lease_id))
    out = m.handle(JobFinished(b"job-one1"))
    assert [(type(i).__name__, i.worker) for i in out] == [("KillWorker", w)]
    assert w not in m.idle


def test_a_worker_runs_the_tasks_of_one_runtime_env_only() -> None:
    m = make({"CPU": 4})
    unused, common = workers(m, 2)
    plain = only(ask(m, request()), Grant).lease
    assert plain.worker is common  # the last one back
    m.handle(LeaseReturned(plain.lease_id))
    # An env takes a worker that never ran anything, and keeps it for itself.
    a = only(ask(m, request(env="A")), Grant).lease
    assert a.worker is unused and unused.env.split("|")[0] == "A"
    m.handle(LeaseReturned(a.lease_id))
    # Another env finds no such worker: one is started for it, not the common pool's.
    assert only(ask(m, request(env="B")), StartWorkers).count == 1
    # The common pool never gets A's worker, nor does A get a used common one.
    assert only(ask(m, request()), Grant).lease.worker is common
    assert only(ask(m, request(env="A")), Grant).lease.worker is unused
    new = Worker(b"w-for-b", m.clock())
    m.handle(WorkerStarted(new))
    b = only(m.handle(WorkerRegistered(new)), Grant).lease
    assert b.worker is new and new.env.split("|")[0] == "B"
