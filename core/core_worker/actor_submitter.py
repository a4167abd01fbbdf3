"""Actor method calls: straight to the actor's worker, in submission order per caller.

The GCS tells us where each actor lives and when it restarts or dies (``actor_update``); until
it is alive, calls wait here in order. Calls in flight when the connection drops wait for the
GCS's verdict: a restarted actor gets them again while ``max_task_retries`` allows, otherwise
they fail with ``ActorUnavailableError`` (Ray's class for a call lost to a restart); calls to
a dead actor fail with ``ActorDiedError``.

Threads: everything runs on the core worker's I/O thread except ``submit_direct``, which the
user's thread calls first. When the actor is connected and nothing of ours is queued ahead,
it writes the call to the actor's socket itself, sparing a wake-up of the I/O thread per call
(a sync call's cost is mostly wake-ups); with calls to it already in flight, it queues the
frame for the I/O thread's next write instead (a burst is one write, and the user's thread
keeps the GIL). Both go through the connection's write lock and its queue of frames, so they
keep the order the calls were made in. ``_lock`` guards what both threads touch: an actor's
state, queue, in-flight table and ``slow_pending``, the count of calls handed to the I/O
thread and not yet queued there, which keeps later direct calls from overtaking them.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from typing import Any, Protocol

from ember.core_worker.io_lock import locked
from ember.core_worker.memory_store import MemoryStore
from ember.core_worker.own_replies import store_missing_values, stored_by_caller
from ember.core_worker.task_spec import TaskSpec, owned_args_pending
from ember.exceptions import (
    ActorDiedError,
    ActorUnavailableError,
    ActorUnschedulableError,
    TaskCancelledError,
)
from ember.gcs_link import GcsLink
from ember.protocol.connection import Connection

logger = logging.getLogger(__name__)


class _Actor:
    __slots__ = (
        "actor_id",
        "state",
        "address",
        "worker_id",
        "conn",
        "connecting",
        "queue",
        "in_flight",
        "lost",
        "death_cause",
        "unschedulable",
        "subscribed",
        "max_task_retries",
        "incarnation",
        "ending",
        "slow_pending",
        "where",
        "side",
        "shared_process",
        "sync_hint",
    )

    def __init__(self, actor_id: bytes) -> None:
        self.actor_id = actor_id
        self.state = "PENDING"
        self.address: str | None = None
        self.worker_id: bytes | None = None
        self.conn: Connection | None = None
        self.connecting = False
        self.queue: deque[TaskSpec] = deque()  # waiting for a connection, in order
        self.in_flight: dict[bytes, TaskSpec] = {}  # {task_id: spec} sent, not answered
        self.lost: list[TaskSpec] = []  # in flight when the connection dropped
        self.death_cause = ""
        self.unschedulable = False  # it died because no node can ever take it
        self.subscribed = False
        self.max_task_retries = 0
        self.incarnation = -1
        self.ending = False  # no handle is left here: end the actor once our calls are done
        self.slow_pending = 0  # calls on their way to the I/O thread (see the module doc)
        # The node, pid and worker of its live incarnation: a call lost with that worker
        # ends there (its task events), even if the worker died before reporting it ran.
        self.where: dict[str, Any] = {}
        # A driver thread's own channel to the actor, while it has one (own_replies.py).
        self.side: Any = None
        self.shared_process = False  # hosted with others in one process (no own channel)
        self.sync_hint = False  # a caller here waits on its calls one by one (own_replies.py)


class ActorSubmitterHost(Protocol):
    """What the actor submitter needs of the rest of the core worker."""

    gcs: GcsLink
    loop: asyncio.AbstractEventLoop
    memory_store: MemoryStore

    def owns(self, object_id: bytes) -> bool: ...
    def inline_small_args(self, spec: TaskSpec) -> None: ...
    def attach_function(self, spec: TaskSpec, conn: Connection) -> None: ...
    def handle_task_reply(self, spec: TaskSpec, reply: dict, retry: Any) -> None: ...
    def record_attempt_failed(
        self, spec: TaskSpec, attempt: int, error: str, error_type: str, **where: Any
    ) -> None: ...
    def record_event(self, spec: TaskSpec, state: str, **extra: Any) -> None: ...
    def fail_task(self, spec: TaskSpec, error: BaseException) -> None: ...
    async def connect_to_worker(self, worker_id: bytes | None, address: str) -> Connection: ...


class ActorSubmitter:
    def __init__(self, host: ActorSubmitterHost) -> None:
        self.host = host
        self._actors: dict[bytes, _Actor] = {}  # {actor_id: _Actor}
        # Reentrant: a reply handled under it may retry a call, which takes it again.
        self._lock = threading.RLock()
        # Calls whose replies the calling thread reads itself (own_replies.py): a driver's,
        # when the core worker turns it on.
        self.own: Any = None

    def _get(self, actor_id: bytes) -> _Actor:
        st = self._actors.get(actor_id)
        if st is None:
            st = self._actors.setdefault(actor_id, _Actor(actor_id))
        if not st.subscribed:
            st.subscribed = True
            self.host.gcs.send("subscribe_actor", {"actor_id": actor_id})
        return st

    @locked
    def resubscribe(self, conn: Connection) -> None:
        """A new GCS process: the actors followed here are followed there too (it answers
        each with the actor's state, which it read back from storage)."""
        for st in list(self._actors.values()):
            if st.subscribed:
                conn.send("subscribe_actor", {"actor_id": st.actor_id})

    def set_retries(self, actor_id: bytes, max_task_retries: int) -> None:
        self._get(actor_id).max_task_retries = max_task_retries

    def submit_direct(self, spec: TaskSpec) -> bool:
        """On the user's thread: sends the call now if nothing must go first. False: hand it
        to ``submit`` on the I/O thread (counted in ``slow_pending`` until it arrives)."""
        with self._lock:
            st = self._actors.get(spec.actor_id)
            if st is None:
                st = self._actors.setdefault(spec.actor_id, _Actor(spec.actor_id))
            conn = st.conn
            if (
                st.slow_pending
                or st.state != "ALIVE"
                or conn is None
                or conn.closed
                or st.queue
                or st.lost
                or st.ending
                or self._args_pending(spec)
            ):
                st.slow_pending += 1
                return False
            own = self.own
            if own is not None and self._own_usable(own, st, spec):
                st.in_flight[spec.task_id] = spec  # before the write: the reply may come at once
                if own.send(self, st, spec, "push_actor_task"):
                    return True
                del st.in_flight[spec.task_id]
            if st.side is not None and st.side.pending:
                st.slow_pending += 1  # after the calls pending on the thread's own channel
                return False
            if own is not None:
                own.note_main_call(st, spec)
            batch = bool(st.in_flight)  # others in flight: join the I/O thread's next write
            st.in_flight[spec.task_id] = spec  # before the write: the reply may come at once

            def on_reply(reply: Any, exc: BaseException | None) -> None:
                self._on_reply(st, spec, reply, exc)

            if batch:
                sent = conn.request_cb_batched("push_actor_task", spec.to_wire(), on_reply)
            else:
                sent = conn.request_cb_direct("push_actor_task", spec.to_wire(), on_reply)
            if sent:
                return True
            del st.in_flight[spec.task_id]
            st.slow_pending += 1
            return False

    def _args_pending(self, spec: TaskSpec) -> list[bytes]:
        host = self.host
        return owned_args_pending(spec, host.owns, host.memory_store.get_if_ready)

    def submit(self, spec: TaskSpec) -> None:
        """On the I/O thread: a call ``submit_direct`` could not send."""
        with self._lock:
            st = self._get(spec.actor_id)
            st.slow_pending -= 1
            self._submit_locked(st, spec)

    def _submit_locked(self, st: _Actor, spec: TaskSpec) -> None:
        if st.state == "DEAD":
            self.host.fail_task(spec, self._died(st))
            return
        pending = self._args_pending(spec)
        # Order matters for actors: a call waiting for arguments holds back the ones after it.
        st.queue.append(spec)
        if pending:
            spec.attempt = -1  # marks "waiting for arguments"
            remaining = {"n": len(pending)}

            def on_ready(_oid, _value) -> None:
                remaining["n"] -= 1
                if remaining["n"] == 0:
                    self.host.loop.call_soon_threadsafe(self._args_ready, spec)

            for oid in pending:
                self.host.memory_store.on_ready(oid, on_ready)
        self._flush(st)

    @locked
    def _args_ready(self, spec: TaskSpec) -> None:
        spec.attempt = 0
        self.host.inline_small_args(spec)
        st = self._actors.get(spec.actor_id)
        if st is not None:
            self._flush(st)

    def _flush(self, st: _Actor) -> None:
        if st.conn is None or st.conn.closed:
            if st.state == "ALIVE" and st.address and not st.connecting:
                asyncio.ensure_future(self._connect(st))
            return
        if st.side is not None and st.side.pending:
            return  # one connection's order at a time: these go once that channel drains
        while st.queue and st.queue[0].attempt != -1:
            spec = st.queue.popleft()
            self._push(st, spec)

    async def _connect(self, st: _Actor) -> None:
        st.connecting = True
        address = st.address
        try:
            conn = await self.host.connect_to_worker(st.worker_id, address)
        except Exception as e:
            logger.info("actor %s unreachable at %s: %s", st.actor_id.hex(), address, e)
            with self._lock:
                st.connecting = False
            return  # the GCS will tell us whether it restarts or dies
        with self._lock:
            st.connecting = False
            if address != st.address:
                return
            st.conn = conn
            self._flush(st)

    def _push(self, st: _Actor, spec: TaskSpec) -> None:
        st.in_flight[spec.task_id] = spec
        self.host.attach_function(spec, st.conn)
        st.conn.request_cb(
            "push_actor_task",
            spec.to_wire(),
            lambda reply, exc: self._on_reply(st, spec, reply, exc),
        )

    # -- cancel ----------------------------------------------------------------------------
    @locked
    def has_call(self, task_id: bytes) -> bool:
        """Whether ``task_id`` is a call of ours not done yet (``ember.cancel`` asks)."""
        return any(self._find(st, task_id) is not None for st in self._actors.values())

    def _find(self, st: _Actor, task_id: bytes) -> TaskSpec | None:
        spec = st.in_flight.get(task_id)
        if spec is None:
            spec = next((s for s in st.queue if s.task_id == task_id), None)
        return spec

    @locked
    def cancel(self, task_id: bytes, recursive: bool) -> None:
        """A call not sent yet is dropped and fails with TaskCancelledError; one sent is the
        actor's to cancel (an async actor's running call gets CancelledError; a threaded
        actor's running call is not interrupted, as in Ray)."""
        for st in self._actors.values():
            queued = next((s for s in st.queue if s.task_id == task_id), None)
            if queued is not None:
                st.queue.remove(queued)
                self.host.fail_task(queued, TaskCancelledError(task_id.hex()))
                self._flush(st)
                return
            if task_id in st.in_flight and st.conn is not None and not st.conn.closed:
                body: dict = {"task_id": task_id}
                if not recursive:
                    body["recursive"] = False
                st.conn.send("cancel_task", body)
                return

    @locked
    def children_of(self, parent_id: bytes) -> list[bytes]:
        return [
            spec.task_id
            for st in self._actors.values()
            for spec in (*st.in_flight.values(), *st.queue)
            if spec.parent_task_id == parent_id
        ]

    @locked
    def end_after_calls(self, actor_id: bytes) -> bool:
        """The last handle is gone. True if we end the actor ourselves after our calls."""
        st = self._actors.get(actor_id)
        if st is None or st.state == "DEAD" or not (st.queue or st.in_flight or st.lost):
            return False
        st.ending = True
        return True

    def _maybe_end(self, st: _Actor) -> None:
        if not st.ending or st.queue or st.in_flight or st.lost:
            return
        st.ending = False
        if not self.host.gcs.closed:
            self.host.gcs.send(
                "kill_actor",
                {
                    "actor_id": st.actor_id,
                    "no_restart": True,
                    "graceful": True,
                    "reason": "all references to the actor were removed",
                    "only_if_not_detached": True,
                },
            )

    @property
    def lock(self) -> threading.RLock:
        return self._lock

    @locked
    def flush_locked(self, st: _Actor) -> None:
        self._flush(st)

    # -- a thread's own channel to the actor (own_replies.py) ----------------------------------
    @staticmethod
    def _own_usable(own: Any, st: _Actor, spec: TaskSpec) -> bool:
        """Whether this call may go on the thread's own channel: not a streaming generator
        (its items come back on the connection the call went out on), not to a
        shared-process actor (thousands of them share a few processes: a socket each would
        cost both sides an open file per actor), and only while nothing of ours to the actor
        is in flight on the main connection (a worker keeps the order of calls per
        connection, so a caller's calls must not be on both at once)."""
        if spec.generator or st.shared_process or not own.usable(st):
            return False
        ch = st.side
        return not st.in_flight if ch is None else len(st.in_flight) == len(ch.pending)

    def settle_own(self, ch: Any, st: _Actor, spec: TaskSpec, reply, exc, on_loop: bool) -> bool:
        """A reply read on a thread's own channel. The common case, a success with small
        values, is settled on the thread that read it (True); the rest on the I/O thread, as
        if read on the main connection; ending the actor after its last call too."""
        here = not on_loop and exc is None and _settles_here(st, spec, reply)
        if here:
            if st.in_flight.pop(spec.task_id, None) is not None:
                self.host.handle_task_reply(spec, reply, self._retry)
                if st.ending:
                    self.host.loop.call_soon_threadsafe(self._maybe_end_locked, st)
        elif on_loop:
            self._on_reply(st, spec, reply, exc)
        else:
            self.host.loop.call_soon_threadsafe(self._on_reply, st, spec, reply, exc)
        if not ch.pending and (st.queue or st.slow_pending):
            # Calls held back while the channel had calls pending can go now.
            self.host.loop.call_soon_threadsafe(self.flush_locked, st)
        return here

    @locked
    def settle_interrupted(self, st: _Actor, spec: TaskSpec, reply, exc) -> None:
        """On the loop: ``settle_own`` was interrupted for this reply (own_replies.py). Not
        taken off ``in_flight`` yet: settled as the loop settles it; taken: its values go
        where its refs read them if they are not there yet."""
        if spec.task_id in st.in_flight:
            self._on_reply(st, spec, reply, exc)
        else:
            store_missing_values(self.host.memory_store, spec, reply)

    def channel_gone(self, st: _Actor) -> None:
        """On the loop: the thread's channel closed; what waited for it goes now."""
        self.flush_locked(st)

    @locked
    def _maybe_end_locked(self, st: _Actor) -> None:
        self._maybe_end(st)

    def _on_reply(self, st: _Actor, spec: TaskSpec, reply, exc) -> None:
        if exc is None:
            # The common case takes no lock: the pop is atomic, and nothing else here is
            # shared with the user's thread.
            if st.in_flight.pop(spec.task_id, None) is None:
                return
            self.host.handle_task_reply(spec, reply, self._retry)
            if st.ending:
                with self._lock:
                    self._maybe_end(st)
            return
        with self._lock:
            if st.in_flight.pop(spec.task_id, None) is None:
                return
            # The actor's worker went away: wait for the GCS to say restart or death.
            if st.conn is not None and st.conn.closed:
                st.conn = None
            if st.state == "DEAD":
                self.host.fail_task(spec, self._died(st))
            else:
                st.lost.append(spec)

    @locked
    def _retry(self, spec: TaskSpec) -> None:
        st = self._get(spec.actor_id)
        st.queue.appendleft(spec)
        self._flush(st)

    # -- GCS updates -----------------------------------------------------------------------
    @locked
    def on_actor_update(self, info: dict[str, Any]) -> None:
        st = self._actors.get(info["actor_id"])
        if st is None:
            return
        state = info["state"]
        incarnation = info.get("num_restarts", 0)
        st.state = state
        st.shared_process = bool(info.get("shared_process"))
        st.death_cause = info.get("death_cause") or st.death_cause
        st.unschedulable = info.get("unschedulable", False)
        if state != "ALIVE" or st.address != info["address"] or st.incarnation != incarnation:
            if st.side is not None and self.own is not None:
                self.own.end(st, f"the actor is {state.lower()}")
        if state == "ALIVE":
            if st.address != info["address"] or st.incarnation != incarnation:
                if st.conn is not None and st.incarnation != incarnation:
                    st.conn = None
                st.address = info["address"]
                st.worker_id = info["worker_id"]
            new_life = st.incarnation != -1 and st.incarnation != incarnation
            st.incarnation = incarnation
            if new_life:
                self._resolve_lost(st)  # on the old incarnation's ``where``
            st.where = {"node_id": info.get("node_id"), "pid": info.get("pid")}
            st.where["worker_id"] = info["worker_id"]
            self._flush(st)
        elif state == "RESTARTING":
            st.conn = None
            self._resolve_lost(st)
        elif state == "DEAD":
            st.conn = None
            err = self._died(st)
            ran = st.lost + list(st.in_flight.values())
            lost = ran + list(st.queue)
            st.lost, st.queue = [], deque()
            st.in_flight.clear()
            where = {k: v for k, v in st.where.items() if v}
            for spec in ran:  # sent to the worker that died: they end on its node
                self.host.record_attempt_failed(spec, spec.attempt, str(err), "ACTOR_DIED", **where)
            for spec in lost:
                self.host.fail_task(spec, err)

    def _resolve_lost(self, st: _Actor) -> None:
        """The actor restarted: calls lost with its old worker go again, or fail."""
        lost, st.lost = st.lost, []
        # Calls in flight on the dead connection whose replies never came count as lost too.
        if st.conn is None and st.in_flight:
            lost.extend(st.in_flight.values())
            st.in_flight.clear()
        why = f"the actor's worker died while this call ran: {st.death_cause or 'no cause given'}"
        for spec in reversed(lost):
            limits = (spec.max_retries, st.max_task_retries)
            # This attempt ended with the worker, on the incarnation it was sent to.
            where = {k: v for k, v in st.where.items() if v}
            self.host.record_attempt_failed(spec, spec.attempt, why, "ACTOR_DIED", **where)
            # -1: retry for as long as the actor restarts (max(-1, 0) would have said never).
            if -1 in limits or spec.attempt < max(limits):
                spec.attempt += 1
                self.host.record_event(spec, "RETRYING", name=spec.display_name())
                st.queue.appendleft(spec)
            else:
                cause = (
                    "its worker died while this call ran; the call was not retried (set "
                    "max_task_retries to retry calls on a restarted actor); later calls go "
                    "to the restarted actor"
                )
                self.host.fail_task(spec, ActorUnavailableError(st.actor_id.hex(), cause))

    def _died(self, st: _Actor) -> ActorDiedError | ActorUnschedulableError:
        if st.unschedulable:
            return ActorUnschedulableError(st.actor_id.hex(), st.death_cause)
        return ActorDiedError(st.actor_id.hex(), st.death_cause or "the actor died")

    @locked
    def forget(self, actor_id: bytes) -> None:
        st = self._actors.pop(actor_id, None)
        if st is not None and st.subscribed and not self.host.gcs.closed:
            self.host.gcs.send("unsubscribe_actor", {"actor_id": actor_id})

    def state_of(self, actor_id: bytes) -> str | None:
        st = self._actors.get(actor_id)
        return None if st is None else st.state


def _settles_here(st: _Actor, spec: TaskSpec, reply: dict) -> bool:
    """Whether a reply read on the calling thread can be settled there: what
    ``stored_by_caller`` allows, and nothing of the actor's for the I/O thread (retries and
    lineage, ending the actor)."""
    return not st.ending and not spec.max_retries and stored_by_caller(spec, reply)
