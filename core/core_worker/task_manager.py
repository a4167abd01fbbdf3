"""The owner's side of every task it submits, from the ``.remote()`` call to its results.

On the caller's thread, ``submit_task`` and ``submit_actor_task`` encode the arguments, make
the task's returns owned and pending objects, hold its argument refs, and hand the task to
its submitter (``task_submitter.py`` for normal tasks, ``actor_submitter.py`` for actor
calls). When a submitter is done with a task, here its final reply's results (or its error)
become the values of those objects and the argument refs are let go. Also here: the
pickled functions this process shipped (sent with a connection's first task that needs one)
and the per-handle ``max_pending_calls`` count.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections import deque
from typing import Any, Protocol

from ember import config
from ember.call_site import user_call_site
from ember.core_worker.generator_streams import NONE_LOCATION
from ember.core_worker.locations import error_location
from ember.core_worker.memory_store import MemoryStore
from ember.core_worker.reference_counter import ReferenceCounter
from ember.core_worker.task_attempts import should_retry_app_error
from ember.core_worker.task_events import (
    TaskEvents,
    dict_section,
    list_section,
    pack_extra,
    packed_sections,
)
from ember.core_worker.task_spec import ARG_INLINE, ARG_REF, GEN_STREAMING, TaskSpec
from ember.exceptions import PendingCallsLimitExceeded, error_type_of
from ember.ids import TASK_ID_SIZE
from ember.object_ref import ObjectRef, counted_ref
from ember.protocol.connection import Connection
from ember.serialization import serialize

logger = logging.getLogger(__name__)
# A borrower's cancel of a task not submitted here yet is tried again this many times, 50 ms
# apart (its submission is on its way: see _cancel_for_borrower).
BORROWER_CANCEL_TRIES = 40

MAX_SHARED_EXTRAS = 4096  # submission events' shared extras kept (``_submitted_extra``)


class _TaskSubmitter(Protocol):
    def submit_direct(self, spec: TaskSpec) -> bool: ...
    def submit(self, spec: TaskSpec) -> None: ...
    def cancel(self, task_id: bytes, force: bool, recursive: bool = True) -> None: ...
    def children_of(self, parent_id: bytes) -> list[bytes]: ...
    def knows(self, task_id: bytes) -> bool: ...
    def oom_notice(self, body: dict) -> dict | None: ...


class _ActorSubmitter(Protocol):
    def submit_direct(self, spec: TaskSpec) -> bool: ...
    def submit(self, spec: TaskSpec) -> None: ...
    def has_call(self, task_id: bytes) -> bool: ...
    def cancel(self, task_id: bytes, recursive: bool) -> None: ...
    def children_of(self, parent_id: bytes) -> list[bytes]: ...


class _Lineage(Protocol):
    def keep(self, spec: TaskSpec, returns: list) -> None: ...


class _Ownership(Protocol):
    def send_remove_borrower(self, object_id: bytes, owner: Any) -> None: ...


class _Streams(Protocol):
    def error_item(self, spec: TaskSpec, error_loc: tuple) -> None: ...
    def task_ended(self, spec: TaskSpec) -> None: ...


class TaskManagerHost(Protocol):
    """What the task manager needs of the rest of the core worker."""

    owner_address: Any
    # The job and namespace of the task running now (a worker serves several jobs).
    job_id: bytes
    namespace: str
    code_path: list[str]
    raylet: Connection
    dropped_refs: deque[bytes]
    task_submitter: _TaskSubmitter
    actor_submitter: _ActorSubmitter
    lineage: _Lineage
    ownership: _Ownership
    streams: _Streams

    def drain_dropped_refs(self) -> None: ...
    def current_task_id(self) -> bytes: ...
    def put(self, value: Any) -> ObjectRef: ...
    def run_sync(self, coro: Any, timeout: float | None) -> Any: ...
    async def connect_to_worker(self, worker_id: bytes, address: str) -> Connection: ...


class TaskManager:
    def __init__(
        self,
        host: TaskManagerHost,
        *,
        worker_id: bytes,
        current: threading.local,
        memory_store: MemoryStore,
        refs: ReferenceCounter,
        events: TaskEvents,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.host = host
        self.worker_id = worker_id
        self._current = current
        self.memory_store = memory_store
        self.refs = refs
        self.events = events
        self.loop = loop
        self._dropped_refs = host.dropped_refs  # one deque for the process's life
        self._functions: dict[bytes, bytes] = {}  # {function_id: pickled function}
        # Actor calls made on handles with max_pending_calls, until each is done.
        self._limited_calls: dict[bytes, bytes] = {}  # {task_id: actor_id}
        self._limited_pending: dict[bytes, int] = {}  # {actor_id: calls pending}
        self._limited_lock = threading.Lock()
        # {(name, function, actor id): a submission event's extra} (``_submitted_extra``)
        self._submitted_extras: dict[tuple, tuple] = {}

    def encode_args(self, args: tuple, kwargs: dict, fn_name: str) -> tuple[list, tuple, list]:
        """Top-level refs stay refs; values are serialized inline or put in the store."""
        if not args and not kwargs:
            return [], (), []
        encoded: list = []
        nested: list = []
        names: tuple = tuple(kwargs)
        for i, value in enumerate(list(args) + list(kwargs.values())):
            if type(value) is ObjectRef:
                encoded.append((ARG_REF, value._id, value._owner))
                continue
            label = (
                f"argument {i} of {fn_name}()"
                if i < len(args)
                else (f"keyword argument {names[i - len(args)]!r} of {fn_name}()")
            )
            ser = serialize(value, what=label)
            if ser.total_size <= config.max_direct_call_object_size:
                encoded.append(
                    (ARG_INLINE, ser.meta, ser.data, [memoryview(b).tobytes() for b in ser.buffers])
                )
                nested.extend(ser.contained)
            else:
                ref = self.host.put(value)  # large values travel through the object store
                encoded.append((ARG_REF, ref._id, ref._owner))
                # Keep the ref until the pending task holds the object (prepare_task).
                holds = getattr(self._current, "submission_holds", None)
                if holds is None:
                    holds = self._current.submission_holds = []
                holds.append(ref)
        return encoded, names, nested

    def inline_small_args(self, spec: TaskSpec) -> None:
        """Owned refs whose values are small and ready ride along inline (saves a fetch)."""
        args = spec.args
        for i, a in enumerate(args):
            if a[0] == ARG_REF and a[2] is not None and a[2][0] == self.worker_id:
                loc = self.memory_store.get_if_ready(a[1])
                if loc is not None and loc[0] == "inline":
                    # The id rides along (ignored by the worker) so the timeline can still
                    # draw the arrow from the object's producer to this task.
                    args[i] = (ARG_INLINE, loc[1], loc[2], loc[3], a[1])

    def prepare_task(self, spec: TaskSpec) -> list[ObjectRef]:
        """Registers the task's returns as owned and pending; returns their refs."""
        if self._dropped_refs:
            self.host.drain_dropped_refs()
        owner = self.host.owner_address
        spec.owner = owner
        spec.parent_task_id = self.host.current_task_id()
        spec.job_id = self.host.job_id
        spec.namespace = self.host.namespace
        oids = spec.return_ids()
        # Called by submit_task or submit_actor_task: the walk starts above both.
        self.refs.add_owned_returns(oids, owner, user_call_site(3))
        self.memory_store.add_pending_many(oids)
        if len(oids) == 1:  # the common case, without a comprehension's frame
            refs = [counted_ref(oids[0], owner)]
        else:
            refs = [counted_ref(oid, owner) for oid in oids]
        if spec.args:
            held = spec.arg_refs()
            if held:
                self.refs.add_submitted(held)
                self.inline_small_args(spec)
        if getattr(self._current, "submission_holds", None):
            self.drop_submission_holds()
        strategy = spec.strategy
        if type(strategy) is tuple and strategy[0] == "PLACEMENT_GROUP":
            # Its group, for the task's row (a link on the Tasks page, Ray's column).
            self.events.record(
                spec,
                "PENDING_ARGS_AVAIL",
                name=spec.display_name(),
                actor_id=spec.actor_id,
                placement_group_id=strategy[1].hex(),
            )
        else:
            self.events.record_shared(spec, "PENDING_ARGS_AVAIL", self._submitted_extra(spec))
        return refs

    def _submitted_extra(self, spec: TaskSpec) -> tuple:
        """The submission event's ``extra``, packed (``task_events.pack_extra``), one for
        every call of a function (of an actor): the event exporter pickles it once a batch
        and the agent reads it once, where one per call cost both, and the submitter one more
        to build. Bounded: names are few, but user-given."""
        key = (spec.name, spec.function_name, spec.actor_id)
        extra = self._submitted_extras.get(key)
        if extra is None:
            if len(self._submitted_extras) >= MAX_SHARED_EXTRAS:
                self._submitted_extras.clear()
            extra = ("name", spec.display_name(), "actor_id", spec.actor_id)
            self._submitted_extras[key] = extra
        return extra

    def drop_submission_holds(self) -> None:
        self._current.submission_holds = None

    def submit_task(self, spec: TaskSpec) -> list[ObjectRef]:
        refs = self.prepare_task(spec)
        submitter = self.host.task_submitter
        if not submitter.submit_direct(spec):
            self.loop.call_soon_threadsafe(submitter.submit, spec)
        return refs

    def submit_actor_task(self, spec: TaskSpec) -> list[ObjectRef]:
        refs = self.prepare_task(spec)
        if not self.host.actor_submitter.submit_direct(spec):
            self.loop.call_soon_threadsafe(self.host.actor_submitter.submit, spec)
        return refs

    def cancel(self, ref: ObjectRef, force: bool, recursive: bool = True) -> None:
        owner = ref.owner_address()
        if owner is not None and owner[0] != self.worker_id:
            self._cancel_at_owner(ref, owner, force, recursive)
            return
        task_id = ref.task_id()
        calls = self.host.actor_submitter
        is_call = calls.has_call(task_id)
        if force and not is_call:
            # A call just made may still be on its way to the submitter (an actor not
            # started yet is not called directly): ask on the I/O thread, after it.
            is_call = self.host.run_sync(_ask(calls.has_call, task_id), 30.0)
        if is_call:
            if force:
                raise ValueError("force=True is not supported for actor tasks.")
            self.loop.call_soon_threadsafe(calls.cancel, task_id, recursive)
            return
        self.loop.call_soon_threadsafe(self.host.task_submitter.cancel, task_id, force, recursive)

    def _cancel_at_owner(self, ref: ObjectRef, owner: Any, force: bool, recursive: bool) -> None:
        """A borrowed ref (returned by another task, passed in): the task that makes it is
        its owner's to cancel, as Ray forwards the cancel there."""
        body: dict[str, Any] = {"object_id": ref.binary(), "force": force, "recursive": recursive}

        async def send() -> None:
            try:
                conn = await self.host.connect_to_worker(owner[0], owner[1])
                conn.send("cancel_for_borrower", body)
            except Exception as e:  # the owner is gone: its tasks' results are lost anyway
                logger.info("could not ask the owner of %s to cancel it: %s", ref.hex(), e)

        self.loop.call_soon_threadsafe(lambda: asyncio.ensure_future(send()))

    def h_cancel_for_borrower(self, conn: Connection, body: dict) -> None:
        """A borrower of one of our objects cancelled it: cancel the task that makes it, as
        our own ``cancel`` would (force is refused for actor calls, as there)."""
        force, recursive = bool(body.get("force")), bool(body.get("recursive", True))
        self._cancel_for_borrower(body["object_id"], force, recursive, BORROWER_CANCEL_TRIES)

    def _cancel_for_borrower(
        self, object_id: bytes, force: bool, recursive: bool, tries: int
    ) -> None:
        task_id = object_id[:TASK_ID_SIZE]
        calls = self.host.actor_submitter
        if calls.has_call(task_id):
            if not force:
                calls.cancel(task_id, recursive)
            return
        if self.host.task_submitter.knows(task_id):
            self.host.task_submitter.cancel(task_id, force, recursive)
        elif tries > 0 and self.memory_store.get_if_ready(object_id) is None:
            # Not submitted yet: the reply that handed the ref out can overtake the task's
            # way to its submitter on this loop. Asked again shortly, a few times.
            self.loop.call_later(
                0.05, self._cancel_for_borrower, object_id, force, recursive, tries - 1
            )

    def cancel_children(self, parent_id: bytes) -> None:
        """On the I/O thread: a cancelled task's children, the tasks and actor calls it
        submitted that are not done, are cancelled too (and theirs, by their workers)."""
        for task_id in self.host.task_submitter.children_of(parent_id):
            self.host.task_submitter.cancel(task_id, False, True)
        for task_id in self.host.actor_submitter.children_of(parent_id):
            self.host.actor_submitter.cancel(task_id, True)

    def register_function(self, function_id: bytes, pickled: bytes) -> None:
        self._functions[function_id] = pickled

    def attach_function(self, spec: TaskSpec, conn: Connection) -> None:
        """Ships the pickled function with the first task a connection sees of it."""
        if not spec.function_id:
            return
        sent = conn.state.get("fns")
        if sent is None:
            sent = conn.state["fns"] = set()
        if spec.function_id in sent:
            spec.function_bytes = None
            spec.code_path = None
        else:
            spec.function_bytes = self._functions.get(spec.function_id)
            spec.code_path = self.host.code_path or None
            sent.add(spec.function_id)

    def h_get_function(self, conn: Connection, body: dict) -> bytes | None:
        return self._functions.get(body["function_id"])

    def h_worker_oom_killed(self, conn: Connection, body: dict) -> dict | None:
        """A raylet's memory monitor is killing a worker leased here (task_submitter.py)."""
        return self.host.task_submitter.oom_notice(body)

    def h_leases_wanted(self, conn: Connection, body: dict) -> None:
        """A raylet has a request waiting for resources our idle leases hold."""
        submitter = self.host.task_submitter
        submitter.leases_wanted(conn, body["lease_ids"], bool(body.get("draining")))

    def handle_task_reply(self, spec: TaskSpec, reply: dict, retry) -> None:
        """An actor call's reply: retried (``retry(spec)``) if its ``retry_exceptions`` say
        so, else final. (Normal tasks decide this in task_attempts.py.)"""
        if reply.get("error") and reply.get("app_error") and should_retry_app_error(spec, reply):
            error_type = reply.get("error_type") or "TASK_EXECUTION_EXCEPTION"
            self.events.record_attempt_failed(
                spec, spec.attempt, reply.get("message") or "", error_type
            )
            spec.attempt += 1
            self.events.record(spec, "RETRYING", name=spec.display_name())
            retry(spec)
            return
        self.complete_task(spec, reply)

    def complete_task(self, spec: TaskSpec, reply: dict) -> None:
        """A task's final reply: its results (or its error) go where its refs can read them."""
        # Bookkeeping first, values last: storing a value wakes the user's thread, which then
        # needs the GIL this thread holds until it goes back to waiting for input.
        if spec.generator == GEN_STREAMING and reply.get("app_error"):
            # As Ray: the exception is the item after the last one yielded, and the task's
            # own return (completed()) holds None; only a task that died holds an error.
            self.host.streams.error_item(spec, reply["returns"][0])
            reply = {**reply, "returns": [NONE_LOCATION]}
        for start, event in reply.get("profile") or ():
            self.events.append((spec.task_id, "PROFILE", start, 0, event))
        # Packed as the event buffer keeps it (task_events.pack_extra): plain data only.
        plain: tuple = (
            "pid",
            reply.get("pid"),
            "node_id",
            reply.get("node_id"),
            "worker_id",
            reply.get("worker_id"),
            "function",
            spec.display_name(),
            # For the timeline's arrows: who submitted it and whose objects it consumed.
            "parent",
            spec.parent_task_id.hex(),
            "owner_pid",
            os.getpid(),
        )
        timings = reply.get("timings")
        sections: tuple = dict_section("timings", timings) if timings else ()
        # The rest only when there is something to say: every key of the event is pickled
        # here, read and converted by the dashboard and journaled, for every task.
        if spec.args or spec.nested_refs:
            sections += list_section("arg_tasks", _producer_task_ids(spec))
        if reply.get("error"):
            plain += ("error", reply.get("message"), "error_type", reply.get("error_type"))
        if reply.get("log"):
            sections += list_section("log", reply["log"])  # the bytes of its log files it wrote
        extra = packed_sections(plain, sections)
        self._task_done(spec, "FAILED" if reply.get("error") else "FINISHED", extra)
        returns = reply["returns"]
        if spec.max_retries and not reply.get("error"):
            self.host.lineage.keep(spec, returns)
        contained = reply.get("contained") or [None] * len(returns)
        for oid, loc, inner in zip(spec.return_ids(), returns, contained, strict=True):
            if self.refs.has(oid):
                if inner:
                    self.refs.set_contains(oid, inner)
                if loc[0] == "plasma":
                    self.refs.set_size(oid, loc[2])
                self.memory_store.put(oid, loc)
            else:
                # Nobody wants the result any more: drop it and what it registered for us.
                if loc[0] == "plasma":
                    self.host.raylet.send("plasma_delete", {"object_ids": [oid]})
                for inner_id, inner_owner in inner or ():
                    if inner_owner[0] != self.worker_id:
                        self.host.ownership.send_remove_borrower(inner_id, inner_owner)
        if spec.generator:
            self.host.streams.task_ended(spec)

    def fail_task(self, spec: TaskSpec, error: BaseException) -> None:
        """The task will not run (again): every return holds ``error``."""
        loc = error_location(error)
        for oid in spec.return_ids():
            if self.refs.has(oid):
                self.memory_store.put(oid, loc)
        if spec.generator:
            self.host.streams.task_ended(spec)
        self._task_done(
            spec,
            "FAILED",
            pack_extra(
                {
                    "function": spec.display_name(),
                    "error": str(error)[:8000],
                    "error_type": error_type_of(error),
                }
            ),
        )

    def admit_limited_call(self, spec: TaskSpec, limit: int) -> None:
        """Counts an actor call on a handle with ``max_pending_calls``; raises
        PendingCallsLimitExceeded when this process already has ``limit`` pending there."""
        with self._limited_lock:
            pending = self._limited_pending.get(spec.actor_id, 0)
            if pending >= limit:
                raise PendingCallsLimitExceeded(
                    f"{spec.function_name}: {pending} calls to actor {spec.actor_id.hex()} are "
                    f"still pending from this process, its handle's max_pending_calls={limit}. "
                    f"Wait for some (ember.get or ember.wait on their refs) before submitting "
                    f"more, or create the actor with a larger max_pending_calls."
                )
            self._limited_pending[spec.actor_id] = pending + 1
            self._limited_calls[spec.task_id] = spec.actor_id

    def _release_limited_call(self, task_id: bytes) -> None:
        with self._limited_lock:
            actor_id = self._limited_calls.pop(task_id, None)
            if actor_id is not None:
                left = self._limited_pending[actor_id] - 1
                if left:
                    self._limited_pending[actor_id] = left
                else:
                    del self._limited_pending[actor_id]

    def _task_done(self, spec: TaskSpec, state: str, extra: tuple | None = None) -> None:
        if self._limited_calls:  # an empty dict when no handle has max_pending_calls
            self._release_limited_call(spec.task_id)
        held = spec.arg_refs()
        if held:
            self.refs.remove_submitted(held)
        if extra:
            self.events.record_shared(spec, state, extra)  # packed, for this event alone
        else:
            self.events.record(spec, state)


def _producer_task_ids(spec: TaskSpec) -> list[str]:
    """Hex ids of the tasks that produced the task's object arguments (by ref or inlined)."""
    out = []
    for a in spec.args:
        if a[0] == ARG_REF:
            out.append(a[1][:TASK_ID_SIZE].hex())
        elif len(a) > 4:
            out.append(a[4][:TASK_ID_SIZE].hex())
    for object_id, _owner in spec.nested_refs or ():
        out.append(object_id[:TASK_ID_SIZE].hex())
    return out


async def _ask(fn: Any, *args: Any) -> Any:
    """``fn(*args)``, run on the I/O thread (through ``run_sync``)."""
    return fn(*args)
