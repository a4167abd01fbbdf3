"""The owner's normal tasks, from submission to their last attempt's end: a sans-I/O state
machine.

``TaskAttempts.handle(event)`` takes what happened to a task (a tuple whose first item names
it) and returns what the I/O shell (``task_submitter.TaskSubmitter``) must do, as a list of
instruction tuples; it sends nothing, waits for nothing and touches no other part of the
core worker, so the tests in ``tests/unit/test_task_attempts.py`` drive it without processes.

A task's states are Ray's task states where they fit (``TASK_ATTEMPT`` below is the whole
table). Two are Ember's own, for a cancel that cannot finish at once: a task cancelled while
it waits for its arguments fails once they are ready (its results stay pending until then),
and a task whose worker is being killed (``force=True``) fails when the worker's death is
seen. A finished task may run again to rebuild a lost result (lineage reconstruction). The
strings recorded as task events for the dashboard are these states' names, as before.

Events (``handle``'s input):
- ``("submit", spec, waiting_on)``: a new task; ``waiting_on`` lists its owned arguments
  whose values are not ready yet.
- ``("args_ready", task_id)``: they all are now.
- ``("lease_granted", spec, lease)``: the shell took the task off its scheduling class's
  queue for a leased worker (``lease`` is opaque here).
- ``("unschedulable", spec, error)``: no lease can be had for its class; it fails.
- ``("reply", task_id, reply)``: the worker answered (a value, or an error).
- ``("worker_died", task_id, error, crashed)``: the push failed; ``crashed`` when the
  connection to the worker closed (the worker or its node died) rather than another error.
- ``("oom_killed", task_id, error, retry)``: the node's memory monitor killed its worker
  (``retry``: the raylet leaves it room to run again, its caller having other tasks there);
  it runs again on its own OOM budget (``oom_retries``, -1 unlimited; not ``max_retries``,
  as in Ray) unless ``max_retries`` is 0, after a delay doubling from ``oom_delay_base``.
  (A task whose own exception is retried waits ``app_retry_delay`` each time, as in Ray.)
- ``("returned", task_id)``: a task pushed behind another (pipelined) came back unstarted:
  its worker gave it back (its running task blocked or ran long) or died before reaching
  it. It was never run, so it queues again at the front, its attempt and retries untouched
  (or fails, if it was cancelled meanwhile).
- ``("cancel", task_id, force)``: ``ember.cancel``.
- ``("reconstruct", spec, waiting_on)``: a finished task runs again (lineage).

Instructions (``handle``'s output), executed in order:
- ``(WAIT_ARGS, spec, object_ids)``: call back with ``args_ready`` once they are ready.
- ``(ENQUEUE, spec)``: queue it in its scheduling class for a lease.
- ``(REQUEUE, spec)``: queue it again at the front of its class (it came back unstarted).
- ``(PUSH, spec, lease)``: send it to the leased worker.
- ``(DEQUEUE, spec)``: take it out of its class's queue.
- ``(SEND_CANCEL, spec, lease, force)``: ask the worker running it to cancel it.
- ``(RETRY, spec)`` or ``(RETRY, spec, delay)``: record the retry, then queue it again
  (after ``delay`` seconds; ``spec.attempt`` is already the new attempt's number).
- ``(FINISH, spec, reply)``: the reply is final: store the results (or the task's error).
- ``(FAIL, spec, error)``: every result holds ``error``.
- ``(FAIL_CRASHED, spec, lease, error)``: its worker died and no retry is left: fail it
  with a WorkerCrashedError saying how the worker died (which the worker's raylet knows;
  else ``error``, the closed connection's).
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from ember.core_worker.task_spec import TaskSpec
from ember.exceptions import TaskCancelledError, WorkerCrashedError
from ember.lifecycle import Lifecycle, Track
from ember.serialization import deserialize


class TaskState(Enum):
    PENDING_ARGS_AVAIL = 1  # waiting for the values of its owned arguments
    PENDING_NODE_ASSIGNMENT = 2  # queued for a leased worker
    SUBMITTED_TO_WORKER = 3  # pushed to a leased worker, no reply yet
    FINISHED = 4  # the reply carried its results
    FAILED = 5  # its results hold an error
    CANCELLED_PENDING_ARGS = 6  # (no longer entered: a cancel while waiting fails at once)
    CANCELLED_KILLING = 7  # force-cancelled while running: its worker is being killed


S = TaskState
TASK_ATTEMPT: Lifecycle[TaskState] = Lifecycle(
    "task",
    {
        S.PENDING_ARGS_AVAIL: {
            "args_ready": S.PENDING_NODE_ASSIGNMENT,
            # As Ray: the caller reads TaskCancelledError now, not once the arguments are
            # ready (which may be never); their late readiness finds the task gone.
            "cancel": S.FAILED,
        },
        S.CANCELLED_PENDING_ARGS: {"args_ready": S.FAILED, "cancel": S.CANCELLED_PENDING_ARGS},
        S.PENDING_NODE_ASSIGNMENT: {
            "lease_granted": S.SUBMITTED_TO_WORKER,
            "unschedulable": S.FAILED,
            "cancel": S.FAILED,
        },
        S.SUBMITTED_TO_WORKER: {
            "finished": S.FINISHED,
            "failed": S.FAILED,
            "retry": S.PENDING_NODE_ASSIGNMENT,
            "returned": S.PENDING_NODE_ASSIGNMENT,
            "cancel": S.SUBMITTED_TO_WORKER,  # the worker interrupts it; its reply says so
            "force_cancel": S.CANCELLED_KILLING,
        },
        # A reply that was on its way when the kill was asked for still counts; a retry does
        # not happen: the task was cancelled.
        S.CANCELLED_KILLING: {
            "finished": S.FINISHED,
            "failed": S.FAILED,
            "cancel": S.CANCELLED_KILLING,
            "force_cancel": S.CANCELLED_KILLING,
        },
        S.FINISHED: {"reconstruct": S.PENDING_ARGS_AVAIL},
    },
)
del S

# Instructions (see the module doc).
WAIT_ARGS = "wait_args"
ENQUEUE = "enqueue"
REQUEUE = "requeue"
PUSH = "push"
DEQUEUE = "dequeue"
SEND_CANCEL = "send_cancel"
RETRY = "retry"
FINISH = "finish"
FAIL = "fail"
FAIL_CRASHED = "fail_crashed"

_DONE = (TaskState.FINISHED, TaskState.FAILED)


class _Task:
    __slots__ = ("spec", "track", "lease", "cancel_asked")

    def __init__(self, spec: TaskSpec, track: Track[TaskState]) -> None:
        self.spec = spec
        self.track = track
        self.lease: Any = None  # the shell's lease while SUBMITTED_TO_WORKER
        # A cancel was sent to its worker: if the task comes back unstarted, it fails.
        self.cancel_asked = False


class TaskAttempts:
    """Every normal task this process owns that has not reached its end yet."""

    def __init__(
        self,
        oom_retries: int = -1,
        oom_delay_base: float = 1.0,
        oom_delay_max: float = 60.0,
        app_retry_delay: float = 0.0,
    ) -> None:
        self._tasks: dict[bytes, _Task] = {}  # {task_id: _Task}
        self.app_retry_delay = app_retry_delay
        self.oom_retries = oom_retries
        self.oom_delay_base = oom_delay_base
        self.oom_delay_max = oom_delay_max
        self._handlers = {
            "submit": self._submit,
            "args_ready": self._args_ready,
            "lease_granted": self._lease_granted,
            "unschedulable": self._unschedulable,
            "reply": self._reply,
            "worker_died": self._worker_died,
            "returned": self._returned,
            "oom_killed": self._oom_killed,
            "cancel": self._cancel,
            "reconstruct": self._reconstruct,
        }

    def handle(self, event: tuple) -> list[tuple]:
        """What the shell must do about ``event`` (see the module doc for both)."""
        return self._handlers[event[0]](event)

    def state_of(self, task_id: bytes) -> TaskState | None:
        """None once the task reached its end (or was never submitted here)."""
        task = self._tasks.get(task_id)
        return None if task is None else task.track.state

    def count(self, state: TaskState) -> int:
        return sum(1 for t in self._tasks.values() if t.track.state is state)

    # -- events ----------------------------------------------------------------------------
    def _submit(self, event: tuple) -> list[tuple]:
        _, spec, waiting_on = event
        track = TASK_ATTEMPT.track(spec.task_id, TaskState.PENDING_ARGS_AVAIL)
        self._tasks[spec.task_id] = _Task(spec, track)
        return self._wait_or_enqueue(spec, track, waiting_on)

    def _reconstruct(self, event: tuple) -> list[tuple]:
        _, spec, waiting_on = event
        track = TASK_ATTEMPT.track(spec.task_id, TaskState.FINISHED)
        track.fire("reconstruct")
        self._tasks[spec.task_id] = _Task(spec, track)
        return self._wait_or_enqueue(spec, track, waiting_on)

    def _wait_or_enqueue(self, spec: TaskSpec, track: Track, waiting_on: list) -> list[tuple]:
        if waiting_on:
            return [(WAIT_ARGS, spec, waiting_on)]
        track.fire("args_ready")
        return [(ENQUEUE, spec)]

    def _args_ready(self, event: tuple) -> list[tuple]:
        task = self._tasks.get(event[1])
        if task is None:
            return []  # cancelled while it waited: failed then
        if task.track.fire("args_ready") is TaskState.FAILED:
            return self._end(task, [(FAIL, task.spec, cancelled_error(task.spec))])
        return [(ENQUEUE, task.spec)]

    def _lease_granted(self, event: tuple) -> list[tuple]:
        _, spec, lease = event
        task = self._tasks[spec.task_id]
        task.track.fire("lease_granted")
        task.lease = lease
        return [(PUSH, spec, lease)]

    def _unschedulable(self, event: tuple) -> list[tuple]:
        _, spec, error = event
        task = self._tasks[spec.task_id]
        task.track.fire("unschedulable")
        return self._end(task, [(FAIL, spec, error)])

    def _reply(self, event: tuple) -> list[tuple]:
        _, task_id, reply = event
        task = self._tasks[task_id]
        spec = task.spec
        track = task.track
        task.lease = None
        if not reply.get("error"):
            track.fire("finished")
            return self._end(task, [(FINISH, spec, reply)])
        if reply.get("app_error") and track.can("retry") and should_retry_app_error(spec, reply):
            track.fire("retry")
            spec.attempt += 1
            # As Ray: a fixed pause, so the retries span a transient condition.
            return (
                [(RETRY, spec, self.app_retry_delay)] if self.app_retry_delay else [(RETRY, spec)]
            )
        track.fire("failed")
        return self._end(task, [(FINISH, spec, reply)])

    def _worker_died(self, event: tuple) -> list[tuple]:
        _, task_id, error, crashed = event
        task = self._tasks[task_id]
        spec = task.spec
        track = task.track
        lease, task.lease = task.lease, None
        if track.state is TaskState.CANCELLED_KILLING:  # the kill we asked for
            track.fire("failed")
            return self._end(task, [(FAIL, spec, cancelled_error(spec))])
        if not crashed:
            track.fire("failed")
            return self._end(task, [(FAIL, spec, error)])
        if retries_left(spec):
            track.fire("retry")
            spec.attempt += 1
            return [(RETRY, spec)]
        track.fire("failed")
        return self._end(task, [(FAIL_CRASHED, spec, lease, error)])

    def _returned(self, event: tuple) -> list[tuple]:
        task = self._tasks[event[1]]
        spec = task.spec
        task.lease = None
        if task.cancel_asked or task.track.state is TaskState.CANCELLED_KILLING:
            task.track.fire("failed")
            return self._end(task, [(FAIL, spec, cancelled_error(spec))])
        task.track.fire("returned")
        return [(REQUEUE, spec)]

    def oom_retry_allowed(self, spec: TaskSpec) -> bool:
        """Whether a task the memory monitor kills may run again, by its own settings."""
        budget = self.oom_retries
        return spec.max_retries != 0 and (budget == -1 or spec.oom_retries < budget)

    def _oom_killed(self, event: tuple) -> list[tuple]:
        _, task_id, error, retry = event
        task = self._tasks[task_id]
        spec = task.spec
        track = task.track
        task.lease = None
        if track.state is TaskState.CANCELLED_KILLING:  # cancelled as the monitor struck
            track.fire("failed")
            return self._end(task, [(FAIL, spec, cancelled_error(spec))])
        if retry and self.oom_retry_allowed(spec):
            track.fire("retry")
            spec.attempt += 1
            spec.oom_retries += 1
            # Right away it would most likely meet the same pressure: back off, as Ray does.
            delay = min(self.oom_delay_base * 2 ** (spec.oom_retries - 1), self.oom_delay_max)
            return [(RETRY, spec, delay)]
        track.fire("failed")
        return self._end(task, [(FAIL, spec, error)])

    def _cancel(self, event: tuple) -> list[tuple]:
        _, task_id, force = event
        task = self._tasks.get(task_id)
        if task is None:
            return []  # already done, or not a task submitted here (an actor call)
        spec = task.spec
        state = task.track.state
        if state is TaskState.PENDING_NODE_ASSIGNMENT:
            task.track.fire("cancel")
            return self._end(task, [(DEQUEUE, spec), (FAIL, spec, cancelled_error(spec))])
        if state is TaskState.SUBMITTED_TO_WORKER or state is TaskState.CANCELLED_KILLING:
            task.cancel_asked = True
            task.track.fire("force_cancel" if force else "cancel")
            return [(SEND_CANCEL, spec, task.lease, force)]
        if task.track.fire("cancel") is TaskState.FAILED:  # it waited for its arguments
            return self._end(task, [(FAIL, spec, cancelled_error(spec))])
        return []

    def children_of(self, parent_id: bytes) -> list[bytes]:
        """The tasks submitted by task ``parent_id`` that are not done."""
        return [t for t, task in self._tasks.items() if task.spec.parent_task_id == parent_id]

    def _end(self, task: _Task, instructions: list[tuple]) -> list[tuple]:
        """The task reached FINISHED or FAILED: nothing more happens to it here."""
        del self._tasks[task.spec.task_id]
        return instructions


# -- decisions, shared with the actor submitter ------------------------------------------------
def retries_left(spec: TaskSpec) -> bool:
    """Whether a task whose worker died may run again (max_retries=-1: always). Attempts
    the memory monitor ended have their own budget."""
    return spec.max_retries == -1 or spec.attempt - spec.oom_retries < spec.max_retries


def should_retry_app_error(spec: TaskSpec, reply: dict) -> bool:
    """Whether the exception a task raised is one its ``retry_exceptions`` retries."""
    if spec.attempt - spec.oom_retries >= spec.max_retries and spec.max_retries != -1:
        return False
    allowed = spec.retry_exceptions
    if allowed is True:
        return True
    if not allowed:
        return False
    try:
        loc = reply["returns"][0]
        err = deserialize(loc[2], loc[3])
        cause = getattr(err, "cause", err)
        return isinstance(cause, tuple(allowed))
    except Exception:
        return False


def cancelled_error(spec: TaskSpec) -> TaskCancelledError:
    return TaskCancelledError(spec.task_id.hex())


def crashed_error(spec: TaskSpec, how: str) -> WorkerCrashedError:
    """The error of a task whose worker died (``how``: its exit code or signal) once no
    retry is left."""
    return WorkerCrashedError(
        f"The worker running {spec.display_name()}() died unexpectedly ({how}); "
        f"the task was tried {spec.attempt + 1} time(s) (max_retries={spec.max_retries})."
    )
