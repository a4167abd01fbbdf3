"""The owner's task state machine, driven without processes: events in, instructions out."""

from __future__ import annotations

import itertools

import pytest
from ember.core_worker.task_attempts import (
    DEQUEUE,
    ENQUEUE,
    FAIL,
    FAIL_CRASHED,
    FINISH,
    PUSH,
    REQUEUE,
    RETRY,
    SEND_CANCEL,
    TASK_ATTEMPT,
    WAIT_ARGS,
    TaskAttempts,
    TaskState,
)
from ember.core_worker.task_spec import TaskSpec
from ember.exceptions import OutOfMemoryError, TaskCancelledError
from ember.lifecycle import TransitionError
from ember.serialization import serialize_error

LEASE = object()  # the shell's lease is opaque to the state machine
OK = {"returns": [("inline", 0, b"", [])]}


_ids = itertools.count(1)


def _spec(**kw) -> TaskSpec:
    return TaskSpec(task_id=next(_ids).to_bytes(16, "big"), function_name="f", **kw)


def _app_error(exc: BaseException) -> dict:
    ser = serialize_error(exc)
    return {
        "returns": [("inline", ser.meta, ser.data, [])],
        "error": True,
        "app_error": True,
        "message": str(exc),
    }


def _ops(instructions: list[tuple]) -> list[str]:
    return [i[0] for i in instructions]


def _running(tasks: TaskAttempts, spec: TaskSpec) -> None:
    assert _ops(tasks.handle(("submit", spec, []))) == [ENQUEUE]
    assert tasks.handle(("lease_granted", spec, LEASE)) == [(PUSH, spec, LEASE)]


def test_the_common_path_submit_lease_reply() -> None:
    tasks, spec = TaskAttempts(), _spec()
    assert tasks.handle(("submit", spec, [])) == [(ENQUEUE, spec)]
    assert tasks.state_of(spec.task_id) is TaskState.PENDING_NODE_ASSIGNMENT
    assert tasks.handle(("lease_granted", spec, LEASE)) == [(PUSH, spec, LEASE)]
    assert tasks.state_of(spec.task_id) is TaskState.SUBMITTED_TO_WORKER
    assert tasks.handle(("reply", spec.task_id, OK)) == [(FINISH, spec, OK)]
    assert tasks.state_of(spec.task_id) is None  # done: nothing kept


def test_pending_arguments_are_waited_for() -> None:
    tasks, spec = TaskAttempts(), _spec()
    assert tasks.handle(("submit", spec, [b"arg"])) == [(WAIT_ARGS, spec, [b"arg"])]
    assert tasks.state_of(spec.task_id) is TaskState.PENDING_ARGS_AVAIL
    assert tasks.handle(("args_ready", spec.task_id)) == [(ENQUEUE, spec)]


def test_an_application_error_is_final_without_retry_exceptions() -> None:
    tasks, spec = TaskAttempts(), _spec(max_retries=3)
    _running(tasks, spec)
    reply = _app_error(ValueError("boom"))
    assert tasks.handle(("reply", spec.task_id, reply)) == [(FINISH, spec, reply)]
    assert spec.attempt == 0


def test_retry_exceptions_retry_until_max_retries() -> None:
    tasks, spec = TaskAttempts(), _spec(max_retries=2, retry_exceptions=True)
    _running(tasks, spec)
    reply = _app_error(ValueError("boom"))
    for attempt in (1, 2):
        assert tasks.handle(("reply", spec.task_id, reply)) == [(RETRY, spec)]
        assert spec.attempt == attempt
        assert tasks.state_of(spec.task_id) is TaskState.PENDING_NODE_ASSIGNMENT
        tasks.handle(("lease_granted", spec, LEASE))
    assert _ops(tasks.handle(("reply", spec.task_id, reply))) == [FINISH]


def test_a_retried_exception_waits_the_retry_delay_each_time() -> None:
    tasks = TaskAttempts(app_retry_delay=1.0)
    spec = _spec(max_retries=2, retry_exceptions=True)
    _running(tasks, spec)
    reply = _app_error(ValueError("boom"))
    for _ in (1, 2):  # the same pause every time, as Ray's (not doubling, as OOM's)
        assert tasks.handle(("reply", spec.task_id, reply)) == [(RETRY, spec, 1.0)]
        tasks.handle(("lease_granted", spec, LEASE))
    # A cancel during the pause takes it off the queue: it never runs again.
    other = _spec(max_retries=1, retry_exceptions=True)
    _running(tasks, other)
    tasks.handle(("reply", other.task_id, reply))
    assert _ops(tasks.handle(("cancel", other.task_id, False))) == [DEQUEUE, FAIL]


def test_retry_exceptions_as_a_list_retry_only_those() -> None:
    tasks = TaskAttempts()
    retried, final = (
        _spec(max_retries=1, retry_exceptions=[KeyError]),
        _spec(max_retries=1, retry_exceptions=[KeyError]),
    )
    _running(tasks, retried)
    _running(tasks, final)
    assert _ops(tasks.handle(("reply", retried.task_id, _app_error(KeyError("k"))))) == [RETRY]
    assert _ops(tasks.handle(("reply", final.task_id, _app_error(ValueError("v"))))) == [FINISH]


def test_a_system_error_is_never_retried() -> None:
    tasks, spec = TaskAttempts(), _spec(max_retries=5, retry_exceptions=True)
    _running(tasks, spec)
    reply = {**_app_error(ValueError("x")), "app_error": False}
    assert _ops(tasks.handle(("reply", spec.task_id, reply))) == [FINISH]


def test_a_dead_worker_retries_then_fails_with_how_it_died() -> None:
    tasks, spec = TaskAttempts(), _spec(max_retries=1)
    _running(tasks, spec)
    err = ConnectionError("closed")
    assert tasks.handle(("worker_died", spec.task_id, err, True)) == [(RETRY, spec)]
    assert spec.attempt == 1
    tasks.handle(("lease_granted", spec, LEASE))
    assert tasks.handle(("worker_died", spec.task_id, err, True)) == [
        (FAIL_CRASHED, spec, LEASE, err)
    ]
    assert tasks.state_of(spec.task_id) is None


def test_max_retries_minus_one_retries_forever() -> None:
    tasks, spec = TaskAttempts(), _spec(max_retries=-1)
    _running(tasks, spec)
    for _ in range(50):
        assert _ops(tasks.handle(("worker_died", spec.task_id, OSError(), True))) == [RETRY]
        tasks.handle(("lease_granted", spec, LEASE))


def test_a_push_that_fails_otherwise_fails_the_task() -> None:
    tasks, spec = TaskAttempts(), _spec(max_retries=3)
    _running(tasks, spec)
    err = RuntimeError("cannot serialize")
    assert tasks.handle(("worker_died", spec.task_id, err, False)) == [(FAIL, spec, err)]


def test_cancel_a_queued_task() -> None:
    tasks, spec = TaskAttempts(), _spec()
    tasks.handle(("submit", spec, []))
    out = tasks.handle(("cancel", spec.task_id, False))
    assert _ops(out) == [DEQUEUE, FAIL]
    assert isinstance(out[1][2], TaskCancelledError)
    assert tasks.state_of(spec.task_id) is None


def test_cancel_a_running_task_asks_its_worker() -> None:
    tasks, spec = TaskAttempts(), _spec()
    _running(tasks, spec)
    assert tasks.handle(("cancel", spec.task_id, False)) == [(SEND_CANCEL, spec, LEASE, False)]
    assert tasks.state_of(spec.task_id) is TaskState.SUBMITTED_TO_WORKER
    # The worker's reply carries the TaskCancelledError; it is final.
    reply = {**_app_error(TaskCancelledError("x")), "app_error": False}
    assert _ops(tasks.handle(("reply", spec.task_id, reply))) == [FINISH]


def test_force_cancel_fails_the_task_when_its_worker_dies_without_retry() -> None:
    tasks, spec = TaskAttempts(), _spec(max_retries=3)
    _running(tasks, spec)
    assert tasks.handle(("cancel", spec.task_id, True)) == [(SEND_CANCEL, spec, LEASE, True)]
    assert tasks.state_of(spec.task_id) is TaskState.CANCELLED_KILLING
    out = tasks.handle(("worker_died", spec.task_id, OSError(), True))
    assert _ops(out) == [FAIL] and isinstance(out[0][2], TaskCancelledError)
    assert spec.attempt == 0


def test_cancel_while_waiting_for_arguments_fails_at_once() -> None:
    # As Ray: the arguments may never be ready (a task that runs for ever).
    tasks, spec = TaskAttempts(), _spec()
    tasks.handle(("submit", spec, [b"arg"]))
    out = tasks.handle(("cancel", spec.task_id, False))
    assert _ops(out) == [FAIL] and isinstance(out[0][2], TaskCancelledError)
    assert tasks.state_of(spec.task_id) is None
    assert tasks.handle(("args_ready", spec.task_id)) == [], "their readiness finds it gone"


def test_cancel_of_an_unknown_or_finished_task_does_nothing() -> None:
    tasks, spec = TaskAttempts(), _spec()
    assert tasks.handle(("cancel", b"x" * 16, True)) == []
    _running(tasks, spec)
    tasks.handle(("reply", spec.task_id, OK))
    assert tasks.handle(("cancel", spec.task_id, False)) == []


def test_lineage_reconstruction_runs_a_finished_task_again() -> None:
    tasks, spec = TaskAttempts(), _spec(max_retries=1)
    _running(tasks, spec)
    tasks.handle(("reply", spec.task_id, OK))
    assert tasks.handle(("reconstruct", spec, [])) == [(ENQUEUE, spec)]
    assert tasks.state_of(spec.task_id) is TaskState.PENDING_NODE_ASSIGNMENT
    tasks.handle(("lease_granted", spec, LEASE))
    assert _ops(tasks.handle(("reply", spec.task_id, OK))) == [FINISH]


def test_unschedulable_fails_queued_tasks() -> None:
    tasks, spec = TaskAttempts(), _spec()
    tasks.handle(("submit", spec, []))
    err = RuntimeError("no node")
    assert tasks.handle(("unschedulable", spec, err)) == [(FAIL, spec, err)]


def test_an_undeclared_move_raises_with_its_history() -> None:
    tasks, spec = TaskAttempts(), _spec()
    tasks.handle(("submit", spec, [b"arg"]))
    with pytest.raises(TransitionError) as info:
        tasks.handle(("lease_granted", spec, LEASE))  # arguments are not ready yet
    assert info.value.state is TaskState.PENDING_ARGS_AVAIL
    assert "created:PENDING_ARGS_AVAIL" in str(info.value)


def test_every_state_is_reachable_and_only_failed_is_terminal() -> None:
    reached = {s for moves in TASK_ATTEMPT.table.values() for s in moves.values()}
    assert reached | {TaskState.PENDING_ARGS_AVAIL} == set(TaskState)
    assert TASK_ATTEMPT.terminal() == {TaskState.FAILED}


# -- the memory monitor's kills ---------------------------------------------------------------
def _oom(tasks: TaskAttempts, spec: TaskSpec, retry: bool = True) -> list[tuple]:
    return tasks.handle(("oom_killed", spec.task_id, OutOfMemoryError("oom"), retry))


def test_an_oom_kill_retries_on_its_own_budget_with_a_doubling_delay() -> None:
    tasks = TaskAttempts(oom_retries=-1, oom_delay_base=1.0, oom_delay_max=3.0)
    spec = _spec(max_retries=1)
    _running(tasks, spec)
    delays = []
    for _ in range(4):
        (ins,) = _oom(tasks, spec)
        assert ins[:2] == (RETRY, spec)
        delays.append(ins[2])
        assert tasks.handle(("lease_granted", spec, LEASE)) == [(PUSH, spec, LEASE)]
    assert delays == [1.0, 2.0, 3.0, 3.0]  # capped
    assert spec.attempt == 4 and spec.oom_retries == 4
    # Its one max_retries is still there for a crash: OOM retries do not count against it.
    assert _ops(tasks.handle(("worker_died", spec.task_id, OSError("gone"), True))) == [RETRY]
    assert tasks.handle(("lease_granted", spec, LEASE)) == [(PUSH, spec, LEASE)]
    assert _ops(tasks.handle(("worker_died", spec.task_id, OSError("gone"), True))) == [
        FAIL_CRASHED
    ]


def test_an_oom_kill_fails_without_leave_max_retries_or_budget() -> None:
    tasks = TaskAttempts(oom_retries=1)
    for spec, retry in ((_spec(max_retries=0), True), (_spec(max_retries=3), False)):
        _running(tasks, spec)
        (ins,) = _oom(tasks, spec, retry)
        assert ins[0] == FAIL and isinstance(ins[2], OutOfMemoryError)
        assert tasks.state_of(spec.task_id) is None
    spec = _spec(max_retries=-1)
    _running(tasks, spec)
    assert _ops(_oom(tasks, spec)) == [RETRY]
    tasks.handle(("lease_granted", spec, LEASE))
    assert _ops(_oom(tasks, spec)) == [FAIL]  # the budget of one is used up


def test_a_task_cancelled_as_the_monitor_kills_it_is_cancelled() -> None:
    tasks, spec = TaskAttempts(), _spec(max_retries=3)
    _running(tasks, spec)
    tasks.handle(("cancel", spec.task_id, True))
    (ins,) = _oom(tasks, spec)
    assert ins[0] == FAIL and isinstance(ins[2], TaskCancelledError)


def test_cancelling_a_task_that_waits_out_its_oom_delay_dequeues_it() -> None:
    tasks, spec = TaskAttempts(), _spec(max_retries=3)
    _running(tasks, spec)
    _oom(tasks, spec)
    assert _ops(tasks.handle(("cancel", spec.task_id, False))) == [DEQUEUE, FAIL]


def test_a_task_returned_unstarted_queues_again_at_its_first_attempt() -> None:
    tasks, spec = TaskAttempts(), _spec(max_retries=0)
    _running(tasks, spec)
    assert tasks.handle(("returned", spec.task_id)) == [(REQUEUE, spec)]
    assert tasks.state_of(spec.task_id) is TaskState.PENDING_NODE_ASSIGNMENT
    assert spec.attempt == 0  # not a retry: max_retries=0 does not fail it
    assert tasks.handle(("lease_granted", spec, LEASE)) == [(PUSH, spec, LEASE)]
    assert _ops(tasks.handle(("reply", spec.task_id, OK))) == [FINISH]


@pytest.mark.parametrize("force", [False, True])
def test_a_task_cancelled_while_held_fails_when_it_comes_back(force: bool) -> None:
    tasks, spec = TaskAttempts(), _spec(max_retries=3)
    _running(tasks, spec)
    assert _ops(tasks.handle(("cancel", spec.task_id, force))) == [SEND_CANCEL]
    out = tasks.handle(("returned", spec.task_id))
    assert _ops(out) == [FAIL]
    assert isinstance(out[0][2], TaskCancelledError)
    assert tasks.state_of(spec.task_id) is None
