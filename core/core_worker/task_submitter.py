"""Normal tasks: lease workers from the raylet per scheduling class, push tasks straight to them.

Runs on the core worker's I/O thread, except ``submit_direct`` (below). A scheduling class is
the resource shape plus the scheduling strategy; tasks of one class share leases. A leased
worker runs one task at a time, and an idle lease is kept for ``lease_idle_seconds`` so a
loop of sync calls costs one round trip to the worker per task, not two.

Pipelining: while a class's tasks are short (the last one took under ``PIPELINE_BELOW_S``
from reaching the head of its worker to its reply) and more wait, a busy lease gets one
more, pushed behind the running one, so the worker starts it without waiting a round trip.
The worker gives it back unstarted if the running task blocks in ``get`` or ``wait`` (it
might be waiting for that very task) or is still running after ``HOLD_QUEUED_S``
(``executor.py``); a task given back, or lost with a worker that died before reaching it,
queues again at the front of its class with its retries untouched (``returned``).

What happens to each task (queue it, push it, retry it, fail it) is decided by the state
machine in ``task_attempts.py``; this module is its I/O shell: it owns the scheduling
classes, leases and connections, tells the machine what happened and does what it says.

Direct submission: a new task whose class has an idle lease and nothing queued, and whose
arguments are ready, is pushed by the user's thread itself (``submit_direct``), written
straight to the worker's socket: in a loop of sync tasks the I/O thread is then woken once
per task (for the reply), not twice. ``_lock`` guards what both threads touch (classes,
leases, the attempts table); every other entry point runs on the I/O thread under it. The
user's thread never touches the loop's timers: an idle lease's hold is a deadline
(``idle_until``) that a timer checks, and a lease taken meanwhile is simply not idle when it
fires. A lease that is taken and freed again within its hold only moves the deadline: a
loop of sync tasks arms one timer per hold (50 ms), not one per task.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections import deque
from typing import Any, Protocol

from ember import config
from ember.core_worker.io_lock import locked
from ember.core_worker.memory_store import MemoryStore
from ember.core_worker.own_replies import store_missing_values, stored_by_caller
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
    WAIT_ARGS,
    TaskAttempts,
    TaskState,
    crashed_error,
)
from ember.core_worker.task_spec import TaskSpec, owned_args_pending
from ember.exceptions import OutOfMemoryError, TaskUnschedulableError
from ember.protocol.connection import Connection, ConnectionClosedError
from ember.runtime_env import env_key

logger = logging.getLogger(__name__)

MAX_PENDING_LEASES_PER_CLASS = 16
MAX_REDIRECTS = 64  # spillbacks one lease request follows before its tasks fail
# How often a class's backlog (queued tasks beyond its lease requests) is reported to the
# raylet while there is one: its queue shows the rest as demand, for `ember status` and the
# autoscaler (Ray sends a backlog size with its lease requests).
BACKLOG_REPORT_S = 0.1
# How long an idle lease is kept while our own task waits in get with its CPU lent out. The
# usual hold (config.lease_idle_seconds) lets a submit-get loop reuse the worker; but a
# task blocked on several children keeps the first child's lease idle, holding its CPU,
# while the others still need CPUs: in a tree of blocking tasks that stalled every level
# for the whole hold. A loop's next submit comes within this much of the reply.
BLOCKED_OWNER_IDLE_SECONDS = 0.002
# A class whose last task took less than this from the head of its worker to its reply gets
# a second task pushed behind a running one (the module doc says how it comes back if that
# was wrong): a round trip here is ~0.3-0.5 ms, so it is what such tasks wait for.
PIPELINE_BELOW_S = 0.002


class _Lease:
    __slots__ = (
        "cls",
        "lease_id",
        "worker_id",
        "address",
        "conn",
        "busy",
        "idle_until",
        "timer_at",
        "raylet",
        "spec",
        "queued",
        "head_since",
        "gpu_ids",
        "node_id",
        "pid",
        "wanted",
        "draining",
        "where",
        "side",
        "sync_hint",
    )

    def __init__(
        self, cls, lease_id, worker_id, address, conn, raylet, gpu_ids=(), node_id=None, pid=None
    ) -> None:
        self.wanted = False  # its raylet has a request waiting for what it holds
        self.draining = False  # its node drains: back once idle, queued tasks or not
        self.cls: _Class = cls  # the scheduling class it was leased for
        self.gpu_ids = list(gpu_ids)
        self.node_id = node_id
        self.pid = pid
        # Where its tasks run, as each push's event says, packed as the event buffer keeps it
        # (task_events.pack_extra): one for the lease's life, so no push builds one (and a
        # batch of events pickles it once).
        self.where = ("worker_id", worker_id, "node_id", node_id, "pid", pid)
        self.lease_id = lease_id
        self.worker_id = worker_id
        self.address = address
        self.conn: Connection = conn
        self.raylet: Connection = raylet
        self.busy = False
        self.idle_until = 0.0  # while idle, it goes back at this loop time (its hold)
        self.timer_at: float | None = None  # when the earliest idle timer armed fires
        self.spec: TaskSpec | None = None  # the task it runs now
        self.queued: TaskSpec | None = None  # the one pushed behind it (pipelined), if any
        self.head_since = 0.0  # when ``spec`` became the first of its tasks on the worker
        # A driver thread's own channel to the worker, while it has one (own_replies.py).
        self.side: Any = None
        self.sync_hint = False  # a caller here waits on its tasks one by one (own_replies.py)


class _Class:
    __slots__ = (
        "key",
        "resources",
        "strategy",
        "queue",
        "idle",
        "leases",
        "pending_leases",
        "waiting_at",
        "backlog_sent",
        "short",
    )

    def __init__(self, key, resources, strategy) -> None:
        self.key = key
        self.resources = resources
        self.strategy = strategy
        self.queue: deque[TaskSpec] = deque()
        self.idle: list[_Lease] = []
        self.leases: set[_Lease] = set()
        self.pending_leases = 0
        # {request number: the raylet it waits at}, for withdrawing requests no task needs.
        self.waiting_at: dict[int, Connection] = {}
        self.backlog_sent = 0  # the queued tasks beyond its lease requests, as last reported
        self.short = False  # its last task was short: pipeline (the module doc)


def _surplus(cls: _Class) -> int:
    """Lease requests out beyond the class's queued tasks (cancelled ones wanted them)."""
    return cls.pending_leases - len(cls.queue)


class _Links(Protocol):
    async def raylet_for_node(self, node_id: bytes, address: str | None = None) -> Connection: ...
    def locality_node(self, spec: Any) -> bytes | None: ...
    def local_node_lost(self) -> bool: ...


class TaskSubmitterHost(Protocol):
    """What the task submitter needs of the rest of the core worker."""

    worker_id: bytes
    job_id: bytes
    raylet: Connection
    shutting_down: bool
    loop: asyncio.AbstractEventLoop
    memory_store: MemoryStore
    links: _Links

    def owns(self, object_id: bytes) -> bool: ...
    def blocked_in_get(self) -> bool: ...
    def inline_small_args(self, spec: TaskSpec) -> None: ...
    def attach_function(self, spec: TaskSpec, conn: Connection) -> None: ...
    def record_event(self, spec: TaskSpec, state: str, **extra: Any) -> None: ...
    def record_event_shared(self, spec: TaskSpec, state: str, extra: tuple) -> None: ...
    def record_attempt_failed(
        self, spec: TaskSpec, attempt: int, error: str, error_type: str, **where: Any
    ) -> None: ...
    def complete_task(self, spec: TaskSpec, reply: dict) -> None: ...
    def fail_task(self, spec: TaskSpec, error: BaseException) -> None: ...
    async def connect_to_worker(self, worker_id: bytes | None, address: str) -> Connection: ...


class TaskSubmitter:
    """The I/O shell of ``TaskAttempts``: it feeds the state machine what happens (arguments
    ready, leases, replies, deaths, cancels) and carries out what it answers."""

    def __init__(self, host: TaskSubmitterHost) -> None:
        self.host = host
        self.attempts = TaskAttempts(
            config.task_oom_retries,
            config.task_oom_retry_delay_base_ms / 1000.0,
            config.task_oom_retry_delay_max_ms / 1000.0,
            config.task_retry_delay_ms / 1000.0,
        )
        self._classes: dict[Any, _Class] = {}
        # The ``recursive`` of the cancel being carried out (the attempts' SEND_CANCEL
        # instruction does not carry it; a cancel runs to its end on this one thread).
        self._recursive = True
        # Workers a raylet's memory monitor said it is killing: {worker_id: (when, what it
        # said, retry)}, read when the worker's connection closes.
        self._oom_notices: dict[bytes, tuple[float, str, bool]] = {}
        self._backoff: dict[bytes, asyncio.TimerHandle] = {}  # retries waiting to queue
        self._request_ids = itertools.count(1)
        self._backlog_timer: asyncio.TimerHandle | None = None
        self._lock = threading.RLock()  # the module doc says what it guards
        self._on_user_thread = False  # a direct submission is being carried out (_push)
        self.direct = 0  # tasks the user's thread pushed itself (submit_direct)
        self.pipelined = 0  # tasks pushed behind a running one
        self.given_back = 0  # of those, how many came back unstarted
        # Tasks whose replies the pushing thread reads itself (own_replies.py): a driver's,
        # when the core worker turns it on.
        self.own: Any = None

    # -- entry -----------------------------------------------------------------------------
    def submit_direct(self, spec: TaskSpec) -> bool:
        """On the user's thread: pushes a new task to an idle lease of its class from this
        thread (the module doc). False, having done nothing: hand it to ``submit``."""
        # Read without the lock first, as a hint: in a burst the class has tasks queued and no
        # idle lease, and the I/O thread, busy with replies under the lock, is not waited for.
        if not config.direct_task_submit:
            return False
        cls = self._classes.get(_class_key(spec))
        if cls is None or cls.queue or not cls.idle:
            return False
        if self._waiting_on(spec) or self.host.shutting_down:
            return False
        with self._lock:
            if cls.queue or not cls.idle:
                return False
            lease = cls.idle[-1]
            if lease.conn.closed or lease.wanted or lease.draining:
                return False
            cls.idle.pop()  # (its idle timer finds it taken)
            instructions = self.attempts.handle(("submit", spec, []))
            assert instructions == [(ENQUEUE, spec)], instructions
            self.host.record_event(spec, "PENDING_NODE_ASSIGNMENT")
            self._on_user_thread = True
            try:
                self._dispatch(lease, spec)
            finally:
                self._on_user_thread = False
            self.direct += 1
            return True

    @locked
    def submit(self, spec: TaskSpec) -> None:
        """On the I/O thread: a new task (its arguments may still be pending)."""
        self._run(self.attempts.handle(("submit", spec, self._waiting_on(spec))))

    @locked
    def resubmit(self, spec: TaskSpec) -> None:
        """On the I/O thread: a finished task runs again to rebuild a lost result."""
        self._run(self.attempts.handle(("reconstruct", spec, self._waiting_on(spec))))

    def _waiting_on(self, spec: TaskSpec) -> list[bytes]:
        host = self.host
        return owned_args_pending(spec, host.owns, host.memory_store.get_if_ready)

    def _run(self, instructions: list[tuple], failure: tuple[str, str] | None = None) -> None:
        """Carries out the state machine's instructions (task_attempts.py lists them);
        ``failure`` is (error, Ray's error type) of the attempt that just failed, which a
        retry records as that attempt's end."""
        for ins in instructions:
            op = ins[0]
            if op == ENQUEUE:
                self._enqueue(ins[1])
            elif op == PUSH:
                self._push(ins[2], ins[1])
            elif op == REQUEUE:
                self._enqueue(ins[1], front=True)
            elif op == FINISH:
                self.host.complete_task(ins[1], ins[2])
            elif op == RETRY:
                spec = ins[1]
                if failure is not None:  # the failed attempt ends (on its row); then the next
                    self.host.record_attempt_failed(spec, spec.attempt - 1, *failure)
                self.host.record_event(spec, "RETRYING", name=spec.display_name())
                if len(ins) > 2:
                    self._enqueue_later(ins[1], ins[2])
                else:
                    self._enqueue(ins[1])
            elif op == FAIL:
                self.host.fail_task(ins[1], ins[2])
            elif op == WAIT_ARGS:
                self._wait_args(ins[1], ins[2])
            elif op == DEQUEUE:
                waiting = self._backoff.pop(ins[1].task_id, None)
                if waiting is not None:
                    waiting.cancel()
                else:
                    cls = self._class_of(ins[1])
                    cls.queue.remove(ins[1])
                    self._withdraw_surplus(cls)
            elif op == SEND_CANCEL:
                body = {"task_id": ins[1].task_id, "force": ins[3]}
                if not ins[3] and not self._recursive:
                    body["recursive"] = False
                ins[2].conn.send("cancel_task", body)
            elif op == FAIL_CRASHED:
                self._fail_crashed(ins[1], ins[2], str(ins[3]))
            else:
                raise AssertionError(f"unknown instruction {ins!r}")

    def _wait_args(self, spec: TaskSpec, object_ids: list[bytes]) -> None:
        remaining = {"n": len(object_ids)}

        def on_ready(_oid, _value) -> None:
            remaining["n"] -= 1
            if remaining["n"] == 0:
                self.host.loop.call_soon_threadsafe(self._args_ready, spec)

        for oid in object_ids:
            self.host.memory_store.on_ready(oid, on_ready)

    @locked
    def _args_ready(self, spec: TaskSpec) -> None:
        self.host.inline_small_args(spec)
        self._run(self.attempts.handle(("args_ready", spec.task_id)))

    def _class_of(self, spec: TaskSpec) -> _Class:
        key = _class_key(spec)
        cls = self._classes.get(key)
        if cls is None:
            cls = self._classes[key] = _Class(key, spec.resources, spec.strategy)
        return cls

    def _enqueue_later(self, spec: TaskSpec, delay: float) -> None:
        def due() -> None:
            with self._lock:
                if self._backoff.pop(spec.task_id, None) is not None:
                    self._enqueue(spec)

        self._backoff[spec.task_id] = self.host.loop.call_later(delay, due)

    def _enqueue(self, spec: TaskSpec, front: bool = False) -> None:
        cls = self._class_of(spec)
        if front:  # it came back unstarted: it was first in line already
            cls.queue.appendleft(spec)
        else:
            cls.queue.append(spec)
        self.host.record_event(spec, "PENDING_NODE_ASSIGNMENT")
        self._pump(cls)

    # -- leases ----------------------------------------------------------------------------
    @locked
    def _pump_locked(self, cls: _Class) -> None:
        self._pump(cls)

    def _pump(self, cls: _Class) -> None:
        while cls.queue and cls.idle:
            lease = cls.idle.pop()  # (its idle timer finds it taken)
            self._dispatch(lease, cls.queue.popleft())
        wanted = len(cls.queue) - cls.pending_leases
        while wanted > 0 and cls.pending_leases < MAX_PENDING_LEASES_PER_CLASS:
            cls.pending_leases += 1
            wanted -= 1
            asyncio.ensure_future(self._request_lease(cls))
        if wanted > 0 and self._backlog_timer is None:
            self._backlog_timer = self.host.loop.call_later(BACKLOG_REPORT_S, self._report_backlogs)

    @locked
    def _report_backlogs(self) -> None:
        """Sends each class's changed backlog to the local raylet; again in a moment while
        any class has one (the queue moves without a pump: leases take tasks as they free)."""
        self._backlog_timer = None
        raylet = self.host.raylet
        if raylet is None or raylet.closed:
            return
        again = False
        for cls in list(self._classes.values()):
            backlog = max(0, len(cls.queue) - cls.pending_leases)
            if backlog != cls.backlog_sent:
                body = {"class_id": id(cls), "resources": cls.resources, "backlog": backlog}
                if cls.strategy is not None:
                    body["strategy"] = cls.strategy
                raylet.send("report_backlog", body)
                cls.backlog_sent = backlog
            again = again or backlog > 0
        if again:
            self._backlog_timer = self.host.loop.call_later(BACKLOG_REPORT_S, self._report_backlogs)

    async def _request_lease(self, cls: _Class) -> None:
        request_id = next(self._request_ids)
        body = {
            "resources": cls.resources,
            "strategy": cls.strategy,
            "client": self.host.worker_id,
            "job_id": self.host.job_id,
            "name": cls.queue[0].function_name if cls.queue else "",
            "retriable": cls.key[2],
            "request_id": request_id,
        }
        if cls.key[3]:
            body["env"] = cls.key[3]
        raylet = self.host.raylet
        try:
            # Large arguments pull the work toward their data (Ray's locality-aware leasing).
            near = self.host.links.locality_node(cls.queue[0]) if cls.queue else None
            if near is not None:
                raylet = await self.host.links.raylet_for_node(near)
            # Each hop is a raylet that knows a better node; past the first few, a raylet sends
            # a request on only after it waited there a second (scheduling.RESPILL_AFTER_S).
            for _ in range(MAX_REDIRECTS):
                cls.waiting_at[request_id] = raylet
                grant = await raylet.call("request_lease", body)
                if not grant or "spillback" not in grant:
                    break
                if _surplus(cls) > 0:
                    grant = None  # its tasks were cancelled meanwhile: no further hop
                    break
                target = grant["spillback"]
                raylet = await self.host.links.raylet_for_node(target["node_id"], target["address"])
                body["spilled"] = body.get("spilled", 0) + 1  # hops so far (see scheduling)
        except Exception as e:
            cls.waiting_at.pop(request_id, None)
            cls.pending_leases -= 1
            if isinstance(e, OSError | TimeoutError) and not self.host.raylet.closed:
                # Another node's raylet went away (or never answered): ask ours again; the
                # cluster view it spills by learns of the death within a heartbeat.
                logger.info("lease request to another node failed (%s); retrying here", e)
                self.host.loop.call_later(0.1, self._pump_locked, cls)
                return
            if self.host.links.local_node_lost():
                return  # the driver fails everything pending, saying why (on_node_lost)
            with self._lock:
                self._fail_queue(cls, e)
            return
        cls.waiting_at.pop(request_id, None)
        if grant is None:  # the raylet gave up on the request (withdrawn, shutting down)
            cls.pending_leases -= 1
            self._pump_locked(cls)
            return
        if "spillback" in grant:  # still redirected after every hop
            cls.pending_leases -= 1
            with self._lock:
                self._fail_queue(cls, TaskUnschedulableError("no node took it"))
            return
        lease_id, worker_id, address = grant["lease_id"], grant["worker_id"], grant["address"]
        # A granted request counts as pending until its worker takes a task: while we connect
        # to the worker, the task it is for is still queued, and a pump meanwhile (another
        # lease's dispatch) asked for one lease too many, which the autoscaler then saw as
        # demand (a GPU node launched for CPU-only work, in tests/cluster/test_cluster_launcher).
        try:
            conn = await self.host.connect_to_worker(worker_id, address)
        except Exception as e:
            cls.pending_leases -= 1
            if self.host.shutting_down:
                return  # the node is stopping: its workers are going away, say nothing
            logger.warning("could not reach leased worker %s: %s", address, e)
            if not raylet.closed:
                raylet.send("return_lease", {"lease_id": lease_id, "worker_died": True})
            self._pump_locked(cls)
            return
        cls.pending_leases -= 1
        self._granted(
            cls,
            _Lease(
                cls,
                lease_id,
                worker_id,
                address,
                conn,
                raylet,
                grant.get("gpu_ids", ()),
                grant.get("node_id"),
                grant.get("pid"),
            ),
        )

    @locked
    def _granted(self, cls: _Class, lease: _Lease) -> None:
        cls.leases.add(lease)
        if cls.queue:
            self._dispatch(lease, cls.queue.popleft())
            # A request slot is free again: the tasks beyond the first 16 get their requests
            # now, not when a task ends (20 tasks that wait for each other on 20 CPUs would
            # otherwise never all run).
            self._pump(cls)
        else:
            self._return_lease(cls, lease)

    def _return_lease(self, cls: _Class, lease: _Lease, worker_died: bool = False) -> None:
        cls.leases.discard(lease)
        if lease in cls.idle:
            cls.idle.remove(lease)
        if lease.side is not None:
            self.own.end(lease, "the lease went back")
        if not lease.raylet.closed:
            lease.raylet.send(
                "return_lease", {"lease_id": lease.lease_id, "worker_died": worker_died}
            )

    def _dispatch(self, lease: _Lease, spec: TaskSpec) -> None:
        """``spec``, just taken off its class's queue, gets ``lease``'s worker."""
        self._run(self.attempts.handle(("lease_granted", spec, lease)))

    def _push(self, lease: _Lease, spec: TaskSpec) -> None:
        if lease.busy:  # pipelined behind the running one (_pipeline)
            lease.queued = spec
            spec.behind = True
        else:
            spec.__dict__.pop("behind", None)  # (given back before: it heads a worker now)
            lease.busy = True
            lease.spec = spec
            lease.head_since = time.monotonic()
        spec.gpu_ids = lease.gpu_ids
        self.host.attach_function(spec, lease.conn)
        # Where this attempt runs, from the lease: its rows say so even if the worker dies
        # before its own RUNNING event leaves it.
        self.host.record_event_shared(spec, "SUBMITTED_TO_WORKER", lease.where)

        def on_reply(reply: Any, exc: BaseException | None) -> None:
            self._on_reply(lease, spec, reply, exc)

        conn = lease.conn
        if not self._on_user_thread:
            conn.request_cb("push_task", spec.to_wire(), on_reply)
            return
        own = self.own
        if own is not None:
            if (
                not spec.generator
                and own.usable(lease)
                and own.send(self, lease, spec, "push_task")
            ):
                return
            own.note_main_call(lease, spec)
        wire = spec.to_wire()
        if conn.request_cb_direct("push_task", wire, on_reply):
            return
        if not conn.request_cb_batched("push_task", wire, on_reply):  # closed meanwhile
            lost = ConnectionClosedError(f"connection {conn.name} is closed: {conn.close_reason}")
            self.host.loop.call_soon_threadsafe(on_reply, None, lost)

    def _pipeline(self, lease: _Lease) -> None:
        """Pushes the next queued task behind ``lease``'s running one, when worth it."""
        cls = lease.cls
        if (
            cls.short
            and config.max_tasks_in_flight_per_worker > 1
            and cls.queue
            and lease.queued is None
            and lease.busy
            and cls.strategy is None  # a placement the strategy chose is not second-guessed
            and not (lease.wanted or lease.draining)
            and not cls.queue[0].generator
        ):
            self.pipelined += 1
            self._dispatch(lease, cls.queue.popleft())

    def _on_queued_reply(self, lease: _Lease, spec: TaskSpec, reply, exc) -> None:
        """The reply to a task pushed behind another, before that one's: it came back
        unstarted (given back, or its worker died first). Any other reply is taken as the
        task's own (no worker sends one today; a held task is given back even when
        cancelled)."""
        lease.queued = None
        if exc is not None or reply.get("returned"):
            self.given_back += 1
            # The task ahead ran long or blocked: no more pipelining until a reply says the
            # class is short again (tasks of about the hold's length would churn otherwise).
            lease.cls.short = False
            self._run(self.attempts.handle(("returned", spec.task_id)))
            return
        self._run(self.attempts.handle(("reply", spec.task_id, reply)), _failure(reply))

    def _on_head_returned(self, lease: _Lease, spec: TaskSpec, now: float) -> None:
        """A task that became its lease's first when the one ahead replied had been given
        back already: whatever was pushed behind it runs there now, or the lease is free."""
        cls = lease.cls
        cls.short = False  # the task ahead of it ran long, or blocked
        self.given_back += 1
        if lease.queued is not None:
            lease.spec, lease.queued = lease.queued, None
            lease.head_since = now
        else:
            lease.busy = False
            lease.spec = None
            if lease.draining or lease.wanted:
                self._return_lease(cls, lease)
            else:
                # Where the requeued task goes first (its pump); held as any free lease, so
                # that it still goes back if that task was cancelled meanwhile (no pump).
                self._hold_idle(cls, lease)
        self._run(self.attempts.handle(("returned", spec.task_id)))

    @locked
    def _on_reply(self, lease: _Lease, spec: TaskSpec, reply, exc) -> None:
        if spec is lease.queued:
            self._on_queued_reply(lease, spec, reply, exc)
            return
        cls = lease.cls
        now = time.monotonic()
        if exc is None and reply.get("returned"):
            self._on_head_returned(lease, spec, now)
            return
        if exc is None:
            cls.short = now - lease.head_since < PIPELINE_BELOW_S
        if lease.queued is not None and exc is None and not reply.get("worker_exiting"):
            # The worker runs the one pushed behind it next (or gives it back).
            lease.spec, lease.queued = lease.queued, None
            lease.head_since = now
            self._run(self.attempts.handle(("reply", spec.task_id, reply)), _failure(reply))
            self._pipeline(lease)
            return
        lease.busy = False
        lease.spec = None
        if exc is not None:
            # The worker went away mid-task: the lease is gone; retry or fail the task.
            self._return_lease(cls, lease, worker_died=True)
            crashed = isinstance(exc, ConnectionClosedError)
            notice = self._oom_notices.pop(lease.worker_id, None)
            if crashed and notice is not None and time.monotonic() - notice[0] < 60.0:
                self._oom_killed(spec, notice[1], notice[2])
            else:
                why = (f"the worker running this attempt died: {exc}", "WORKER_DIED")
                event = ("worker_died", spec.task_id, exc, crashed)
                self._run(self.attempts.handle(event), why)
            self._pump(cls)
            return
        instructions = self.attempts.handle(("reply", spec.task_id, reply))
        # The lease's fate first, then the results: a caller they wake submits its next task
        # at once, and finds the lease idle (``submit_direct``).
        exiting = bool(reply.get("worker_exiting"))
        if exiting or lease.draining:
            self._return_lease(cls, lease, worker_died=exiting)
        elif cls.queue:
            self._dispatch(lease, cls.queue.popleft())
            self._pipeline(lease)
        elif lease.wanted:  # another request waits for its resources: no hold
            self._return_lease(cls, lease)
        else:
            self._hold_idle(cls, lease)
        self._run(instructions, _failure(reply))
        if exiting or lease.draining:
            self._pump(cls)  # what waits asks for a lease elsewhere

    def _hold_idle(self, cls: _Class, lease: _Lease, on_loop: bool = True) -> None:
        """Keeps a free lease for the class's next task, for a while (the module doc).
        ``on_loop`` False: on a user's thread (``_settle_here``), which asks the loop to arm
        the hold's timer only when none armed fires by then (once per hold in a sync loop)."""
        cls.idle.append(lease)
        hold = config.lease_idle_seconds
        if self.host.blocked_in_get():
            hold = min(hold, BLOCKED_OWNER_IDLE_SECONDS)
        # The loop's clock is the monotonic one (read in milliseconds): a thread can use it.
        lease.idle_until = (self.host.loop.time() if on_loop else time.monotonic()) + hold
        if on_loop:
            self._arm_idle_timer(cls, lease)
        elif lease.timer_at is None or lease.idle_until < lease.timer_at:
            self.host.loop.call_soon_threadsafe(self._arm_idle_timer_locked, cls, lease)

    def _arm_idle_timer(self, cls: _Class, lease: _Lease) -> None:
        """A timer for the lease's hold, unless one armed already fires by then."""
        at = lease.idle_until
        if lease.timer_at is None or at < lease.timer_at:
            lease.timer_at = at
            self.host.loop.call_at(at, self._idle_check, cls, lease, at)

    @locked
    def _idle_check(self, cls: _Class, lease: _Lease, at: float) -> None:
        """An idle timer fired: the lease goes back if it is still idle and its hold is over;
        if it was taken and freed since, a timer for its new deadline."""
        if lease.timer_at == at:
            lease.timer_at = None
        if lease.busy or lease not in cls.idle:
            return  # taken (or gone): freeing it again arms a timer if none is
        # (A timer may fire up to a millisecond early: uvloop's clock counts milliseconds.)
        if self.host.loop.time() >= lease.idle_until - 0.001:
            self._return_lease(cls, lease)
        else:
            self._arm_idle_timer(cls, lease)

    # -- a thread's own channel to a leased worker (own_replies.py) -------------------------
    @property
    def lock(self) -> threading.RLock:
        return self._lock

    def settle_own(self, ch: Any, lease: _Lease, spec: TaskSpec, reply, exc, on_loop: bool) -> bool:
        """A reply read on a thread's own channel. The common case (below) is settled on the
        thread that read it (True); the rest on the I/O thread, as if read on the main
        connection."""
        if on_loop:
            self._on_reply(lease, spec, reply, exc)
            return False
        if exc is None and self._settle_here(lease, spec, reply):
            return True
        self.host.loop.call_soon_threadsafe(self._on_reply, lease, spec, reply, exc)
        return False

    @locked
    def _settle_here(self, lease: _Lease, spec: TaskSpec, reply: dict) -> bool:
        """``_on_reply``'s common case on the user's thread: a success with small values, its
        lease free for the class's next task and nothing else to do with it (no queue, no
        task behind it, not wanted elsewhere). The lease is held idle as ``_hold_idle``
        holds it; only arming its timer needs the loop, and a loop of sync tasks arms one
        per hold, not per task. False, having changed nothing: the loop settles it."""
        cls = lease.cls
        if (
            lease.spec is not spec
            or lease.queued is not None
            or cls.queue
            or lease.wanted
            or lease.draining
            or reply.get("returned")
            or reply.get("worker_exiting")
            or not stored_by_caller(spec, reply)
        ):
            return False
        now = time.monotonic()
        cls.short = now - lease.head_since < PIPELINE_BELOW_S
        lease.busy = False
        lease.spec = None
        instructions = self.attempts.handle(("reply", spec.task_id, reply))
        self._hold_idle(cls, lease, on_loop=False)
        if all(ins[0] == FINISH for ins in instructions):
            self._run(instructions)
        else:  # (a cancel that came too late, say): the loop carries it out
            self.host.loop.call_soon_threadsafe(self._run_locked, instructions, _failure(reply))
        return True

    @locked
    def settle_interrupted(self, lease: _Lease, spec: TaskSpec, reply, exc) -> None:
        """On the loop: ``settle_own`` was interrupted for this reply (own_replies.py). Not
        taken yet (the lease still runs it): settled as the loop settles it. Taken: its
        values go where its refs read them if they are not there yet, and a lease left
        neither busy nor held is held idle (else it would stay leased, unused, for the
        driver's life). An attempt whose reply the interrupt kept from the attempt table
        stays as it was on the dashboard."""
        if lease.spec is spec:
            self._on_reply(lease, spec, reply, exc)
            return
        store_missing_values(self.host.memory_store, spec, reply)
        cls = lease.cls
        if lease in cls.leases and not lease.busy and lease not in cls.idle:
            self._hold_idle(cls, lease)

    @locked
    def _arm_idle_timer_locked(self, cls: _Class, lease: _Lease) -> None:
        # Armed even if the lease was taken again meanwhile (in a sync loop it nearly always
        # is): the timer finds it busy and leaves it; not arming it would have the next
        # task's thread ask again, a wake-up of the loop per task.
        if lease in cls.leases:
            self._arm_idle_timer(cls, lease)

    @locked
    def _run_locked(self, instructions: list[tuple], failure: tuple[str, str] | None) -> None:
        self._run(instructions, failure)

    def channel_gone(self, lease: _Lease) -> None:
        """The thread's channel to the lease's worker closed: nothing waits for it."""

    def _fail_crashed(self, spec: TaskSpec, lease: _Lease, reason: str) -> None:
        """Fails a task whose worker died, saying how it died (exit code or signal), which
        the raylet that leased the worker knows (else ``reason``)."""
        raylet = lease.raylet
        if raylet is None or raylet.closed:
            self.host.fail_task(spec, crashed_error(spec, reason))
            return

        def on_reason(fut: asyncio.Future) -> None:
            # The raylet answers within its own deadline, or its connection fails the future.
            how = None if fut.cancelled() or fut.exception() else fut.result()
            self.host.fail_task(spec, crashed_error(spec, how or reason))

        raylet.request("worker_exit_reason", {"worker_id": lease.worker_id}).add_done_callback(
            on_reason
        )

    # -- the memory monitor ----------------------------------------------------------------
    @locked
    def oom_notice(self, body: dict) -> dict | None:
        """A raylet's memory monitor is killing one of our leased workers: the task it runs
        and whether that will run again (``worker_oom_killed``)."""
        wid = body["worker_id"]
        for cls in self._classes.values():
            for lease in cls.leases:
                if lease.worker_id != wid:
                    continue
                spec = lease.spec
                if spec is None:
                    return None  # idle: no task of ours is lost with it
                retry = bool(body.get("retry")) and self.attempts.oom_retry_allowed(spec)
                self._oom_notices[wid] = (time.monotonic(), body["detail"], retry)
                return {"task_id": spec.task_id, "name": spec.display_name(), "retry": retry}
        return None

    def _oom_killed(self, spec: TaskSpec, detail: str, retry: bool) -> None:
        name = f"{spec.display_name()}() (task {spec.task_id.hex()})"
        if spec.max_retries == 0:
            why = "it has max_retries=0"
        elif not retry:
            why = (
                "it was the only task its caller had running on the node, so running it "
                "again would only meet the same pressure"
            )
        else:
            budget = config.task_oom_retries
            why = f"its memory-monitor retries (EMBER_TASK_OOM_RETRIES={budget}) are used up"
        error = OutOfMemoryError(
            f"Task {name} was killed by the memory monitor of its node, which was running "
            f"out of memory, and is not retried: {why}.\n{detail}"
        )
        instructions = self.attempts.handle(("oom_killed", spec.task_id, error, retry))
        for ins in instructions:
            if ins[0] == RETRY:  # Ray's owner warns of each OOM retry too
                logger.warning(
                    "Task %s was killed by its node's memory monitor; it runs again in %.1f s "
                    "(memory-monitor retry %d, EMBER_TASK_OOM_RETRIES=%d).\n%s",
                    name,
                    ins[2],
                    spec.oom_retries,
                    config.task_oom_retries,
                    detail,
                )
        self._run(
            instructions, (f"killed by its node's memory monitor:\n{detail}", "OUT_OF_MEMORY")
        )

    @locked
    def leases_wanted(
        self, raylet: Connection, lease_ids: list[int], draining: bool = False
    ) -> None:
        """``raylet`` has a request waiting for what these leases hold: each goes back as soon
        as it is idle (now, if it is), not after the usual hold (``leases_wanted``). A
        draining node's leases go back even while tasks of their class wait: those get a
        lease elsewhere."""
        wanted = set(lease_ids)
        for cls in self._classes.values():
            for lease in list(cls.leases):
                if lease.raylet is not raylet or lease.lease_id not in wanted:
                    continue
                lease.wanted = True
                lease.draining = lease.draining or draining
                if lease in cls.idle and not lease.busy:
                    self._return_lease(cls, lease)

    def _withdraw_surplus(self, cls: _Class) -> None:
        """Lease requests beyond the queued tasks (cancelled ones wanted them) are withdrawn
        from their raylets, newest first, as Ray cancels a worker lease: a request left
        waiting for a node that may never come is demand the autoscaler would act on."""
        surplus = _surplus(cls)
        if surplus <= 0 or not cls.waiting_at:
            return
        for request_id in list(cls.waiting_at)[-surplus:]:
            raylet = cls.waiting_at[request_id]
            if not raylet.closed:
                raylet.send("cancel_lease_request", {"request_id": request_id})

    def _fail_queue(self, cls: _Class, error: BaseException) -> None:
        while cls.queue:
            self._run(self.attempts.handle(("unschedulable", cls.queue.popleft(), error)))

    # -- cancel ----------------------------------------------------------------------------
    @locked
    def cancel(self, task_id: bytes, force: bool, recursive: bool = True) -> None:
        """Cancels a queued task, or interrupts (force: kills) the worker running it; with
        ``recursive``, that worker cancels the tasks it submitted too."""
        self._recursive = recursive
        self._run(self.attempts.handle(("cancel", task_id, force)))

    @locked
    def knows(self, task_id: bytes) -> bool:
        """Whether the task was submitted here and is not done."""
        return self.attempts.state_of(task_id) is not None

    @locked
    def children_of(self, parent_id: bytes) -> list[bytes]:
        return self.attempts.children_of(parent_id)

    @locked
    def on_node_dead(self, node_id: bytes) -> None:
        """A node was declared dead: its workers' tasks are lost even if their sockets stay
        open (a silent node), so close them; the replies fail and the tasks retry."""
        for cls in self._classes.values():
            for lease in list(cls.leases):
                if lease.node_id == node_id:
                    lease.conn.close(f"its node {node_id.hex()[:12]} died")
                    if lease.side is not None:
                        self.own.end(lease, f"its node {node_id.hex()[:12]} died")

    @locked
    def release_all(self) -> None:
        for cls in self._classes.values():
            for lease in list(cls.leases):
                if not lease.busy:
                    self._return_lease(cls, lease)

    @locked
    def stats(self) -> dict[str, int]:
        held = sum(1 for c in self._classes.values() for lease in c.leases if lease.queued)
        return {
            "queued": sum(len(c.queue) for c in self._classes.values()),
            "leases": sum(len(c.leases) for c in self._classes.values()),
            # A task pushed behind a running one is SUBMITTED_TO_WORKER (Ray's state for a
            # task pushed to a worker) but not running yet: counted apart.
            "running": self.attempts.count(TaskState.SUBMITTED_TO_WORKER) - held,
            "held": held,
            "direct": self.direct,
            "pipelined": self.pipelined,
            "given_back": self.given_back,
        }


def _failure(reply: dict) -> tuple[str, str] | None:
    """(error, Ray's error type) of a reply that failed its attempt, for the attempt's row."""
    if not reply.get("error"):
        return None
    return (reply.get("message") or "", reply.get("error_type") or "TASK_EXECUTION_EXCEPTION")


def _class_key(spec: TaskSpec) -> tuple:
    # Retriable or not is part of the class: a lease tells its raylet which it is, for the
    # memory monitor, which kills retriable work first.
    retriable = spec.max_retries != 0
    # A runtime_env is part of it too: its tasks run in workers kept for that env.
    env = env_key(spec.runtime_env) if spec.runtime_env else ""
    return (tuple(sorted(spec.resources.items())), _strategy_key(spec.strategy), retriable, env)


def _strategy_key(strategy: Any) -> Any:
    if strategy is None or isinstance(strategy, str):
        return strategy
    return repr(strategy)
