"""Actors hosted many to one worker process (``shared_process=True``).

A dedicated actor is a process: its state, its queue and its death are the process's. A
shared-process actor ("guest") is an object in a host process the raylet keeps for its job
(``raylet/shared_hosts.py``), so ten thousand of them fit where ten thousand processes would
not. Each guest keeps what a caller can tell apart:

- its own state (its own instance) and its own ordered mailbox: its calls run one at a time
  in the order they arrived (``max_concurrency`` at a time when it asks for more), while the
  calls of other guests run beside them on the host's call threads;
- its own identity: ``get_runtime_context()`` in a call names this guest, and its row in
  every listing is its own (the pid is the host's);
- its own end: ``exit_actor()`` or ``sys.exit(0)`` ends this guest only (after the call that
  made it), ``ember.kill`` drops this guest only, and any other ``sys.exit()`` is this guest's
  crash (the GCS restarts it by its own ``max_restarts``, its call retried by its own
  ``max_task_retries``). A crash of the process fails all its guests, each restarted by its
  own rules in another host.

What a guest shares, and cannot have: ``os.getpid()``, the process's ``atexit`` handlers
(they run when the host ends, not when a guest does), environment variables (so no per-actor
``runtime_env`` or GPUs: refused when the actor is created), and the objects its calls put
(owned by the host process, so they outlive the guest while the host lives).

Async guests share one event loop thread, each bounded by its own ``max_concurrency``.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from typing import TYPE_CHECKING, Any

from ember.core_worker.call_threads import CallThreads
from ember.core_worker.concurrency_groups import Lane
from ember.core_worker.task_spec import TaskSpec
from ember.exceptions import ActorDiedError, ActorExit, exit_cause
from ember.protocol.connection import DEFERRED, Deferred

if TYPE_CHECKING:
    from ember.core_worker.executor import Executor

# Why the latest guests ended, for calls that reach the host after: as many as this.
ENDED_KEPT = 4096

# Threads serving the guests' mailboxes start as calls need them, up to this many: a call
# that blocks (an ``ember.get`` on another guest's call) must not hold up every other guest.
MAX_CALL_THREADS = 64


class Guest:
    """One shared-process actor in this host."""

    __slots__ = (
        "actor_id",
        "spec",
        "name",
        "instance",
        "bound",
        "mailbox",
        "active",
        "concurrency",
        "is_async",
        "limit",
        "in_flight",
        "exit_reason",
        "crashed",
        "gone",
    )

    def __init__(self, spec: TaskSpec) -> None:
        opts = spec.actor_options or {}
        self.actor_id: bytes = spec.actor_id
        self.spec = spec
        self.name: str = opts.get("class_name", "Actor")
        self.instance: Any = None
        self.bound: dict[str, Any] = {}
        self.mailbox: collections.deque[tuple[TaskSpec, Deferred]] = collections.deque()
        self.active = 0  # threads draining its mailbox now
        self.is_async = bool(opts.get("is_async"))
        self.concurrency: int = opts.get("max_concurrency") or 1
        self.limit: asyncio.Semaphore | None = None  # an async guest's, made on the loop
        self.in_flight = 0  # an async guest's calls started and not answered
        self.exit_reason = ""  # set once it is to end on purpose (or crash: ``crashed``)
        self.crashed = False
        self.gone = False  # dropped: its calls answer ActorDiedError


class SharedActors:
    """The guests of this host process, their mailboxes and the threads that serve them."""

    def __init__(self, executor: Executor) -> None:
        self.executor = executor
        self.host = executor.host
        self.guests: dict[bytes, Guest] = {}
        self.lock = threading.Lock()
        self.threads = CallThreads(MAX_CALL_THREADS, "ember-guest")
        self._lane: Lane | None = None  # the async guests' event loop, made on first need
        # {actor_id: why it ended}: a call sent before its caller heard of the end says why.
        self.ended: collections.OrderedDict[bytes, str] = collections.OrderedDict()
        self._title_count = -1

    # -- on the I/O thread -----------------------------------------------------------------
    def on_create(self, conn: Any, spec: TaskSpec) -> object:
        guest = Guest(spec)
        self.guests[spec.actor_id] = guest
        self.threads.submit(self._construct, guest, spec, conn.deferred())
        return DEFERRED

    def on_call(self, conn: Any, spec: TaskSpec) -> object:
        reply_to = conn.deferred()
        guest = self.guests.get(spec.actor_id)
        if guest is None or guest.gone or guest.instance is None:
            reply_to.resolve(self._died_reply(spec, guest))
            return DEFERRED
        if guest.is_async:
            lane = self._async_lane()
            lane.loop.call_soon_threadsafe(self._start_async, guest, spec, reply_to)
            return DEFERRED
        with self.lock:
            guest.mailbox.append((spec, reply_to))
            start = guest.active < guest.concurrency
            if start:
                guest.active += 1
        if start:
            self.threads.submit(self._drain, guest)
        return DEFERRED

    def end(self, body: dict) -> None:
        """``exit`` for one guest: ``force`` (``ember.kill``, its job's end) drops it now and
        fails its queued calls; otherwise (its handles are gone) it ends after them."""
        guest = self.guests.get(body.get("actor_id", b""))
        if guest is None or guest.gone:
            return
        reason = body.get("reason") or "it was asked to exit"
        if body.get("force"):
            guest.exit_reason = guest.exit_reason or reason
            self._drop(guest)
            return
        if guest.is_async:  # after the calls it has started
            guest.exit_reason = guest.exit_reason or reason
            if guest.in_flight == 0:
                self.threads.submit(self._report_exit, guest)
            return
        with self.lock:
            # Its end, queued behind the calls it has: the reason rides in the reply's place.
            guest.mailbox.append((None, reason))  # type: ignore[arg-type]
            start = guest.active < guest.concurrency
            if start:
                guest.active += 1
        if start:
            self.threads.submit(self._drain, guest)

    # -- on the call threads ---------------------------------------------------------------
    def _construct(self, guest: Guest, spec: TaskSpec, reply_to: Deferred) -> None:
        self.host.current.actor_id = spec.actor_id
        reply = self.executor.execute(spec)
        if reply.get("error"):
            self.guests.pop(spec.actor_id, None)
        reply_to.resolve_threadsafe(reply)
        self._retitle()

    def construct(self, spec: TaskSpec, cls: Any, args: list, kwargs: dict) -> None:
        """The executor's part of an actor creation task, for a guest."""
        guest = self.guests[spec.actor_id]
        self.executor.adopt_code_path(spec.code_path)
        if guest.is_async:
            asyncio.set_event_loop(self._async_lane().loop)  # the constructor's current loop
        instance = cls.__new__(cls)
        instance.__init__(*args, **kwargs)
        guest.instance = instance

    def _drain(self, guest: Guest) -> None:
        """Runs the guest's queued calls in order until its mailbox is empty."""
        current = self.host.current
        while True:
            with self.lock:
                if not guest.mailbox:
                    guest.active -= 1
                    return
                spec, reply_to = guest.mailbox.popleft()
            if spec is None:  # asked to end after the calls before it
                guest.exit_reason = guest.exit_reason or reply_to  # type: ignore[assignment]
                self._report_exit(guest)
                continue
            if guest.gone:
                reply_to.resolve_threadsafe(self._died_reply(spec, guest))
                continue
            current.actor_id = guest.actor_id
            reply = self.executor.execute(spec)
            self._answer(guest, spec, reply, reply_to)
            if guest.exit_reason and not guest.gone:
                self._report_exit(guest)

    def _answer(self, guest: Guest, spec: TaskSpec, reply: dict, reply_to: Deferred) -> None:
        if guest.crashed:
            # As a crashed process gives no reply: the GCS's restart (or death) of this
            # guest decides whether its caller retries the call or fails it.
            return
        if guest.gone and not reply.get("error"):
            reply = self._died_reply(spec, guest)  # killed while the call ran
        reply_to.resolve_threadsafe(reply)

    def _report_exit(self, guest: Guest) -> None:
        """The guest ends on purpose: dropped here, and the GCS told (it is DEAD then)."""
        if guest.gone:
            return
        self._drop(guest)
        try:
            self.host.call_gcs_sync(
                "actor_exited",
                {"actor_id": guest.actor_id, "reason": guest.exit_reason},
                timeout=5.0,
            )
        except Exception:
            pass  # the GCS returns its lease when it learns of the end another way

    # -- async guests ----------------------------------------------------------------------
    def _async_lane(self) -> Lane:
        with self.lock:
            if self._lane is None:
                self._lane = Lane("ember-guests-async", 1)
            return self._lane

    def _start_async(self, guest: Guest, spec: TaskSpec, reply_to: Deferred) -> None:
        """On the async lane's loop."""
        if guest.limit is None:
            guest.limit = asyncio.Semaphore(guest.concurrency)
        guest.in_flight += 1

        def after(reply: dict) -> None:
            guest.in_flight -= 1
            self._answer(guest, spec, reply, reply_to)
            if guest.exit_reason and guest.in_flight == 0 and not guest.gone:
                self._submit_from_any_thread(self._report_exit, guest)

        self.executor.start_async_call(spec, guest.limit, after)

    def _submit_from_any_thread(self, fn: Any, *args: Any) -> None:
        """``CallThreads.submit`` takes calls from the I/O thread only."""
        self.host.loop.call_soon_threadsafe(self.threads.submit, fn, *args)

    # -- what the executor asks --------------------------------------------------------------
    def method(self, spec: TaskSpec) -> Any:
        guest = self.guests.get(spec.actor_id)
        if guest is None or guest.instance is None or guest.gone:
            raise ActorDiedError(spec.actor_id.hex(), "the actor is not in this process")
        method = guest.bound.get(spec.method_name)
        if method is None:
            method = self.executor.bind_method(guest.instance, spec.method_name, guest.bound)
        return method

    def name_of(self, spec: TaskSpec) -> str:
        guest = self.guests.get(spec.actor_id)
        return guest.name if guest is not None else ""

    def spec_of(self, actor_id: bytes | None) -> TaskSpec | None:
        guest = self.guests.get(actor_id) if actor_id else None
        return guest.spec if guest is not None else None

    def exit_reply(self, spec: TaskSpec, e: SystemExit) -> dict:
        """A method raised SystemExit: this guest ends after its reply (exit_actor,
        ``sys.exit(0)``) or crashes (any other ``sys.exit()``), alone."""
        guest = self.guests.get(spec.actor_id)
        intended = isinstance(e, ActorExit) or e.code == 0
        reason = exit_cause(e, spec.display_name())
        if guest is not None and intended:
            guest.exit_reason = reason + " (an intentional exit)"
        elif guest is not None:
            guest.crashed = True
            self._drop(guest)
            self.host.gcs_send_threadsafe(
                "worker_died",
                {
                    "worker_id": self.host.worker_id,
                    "actor_id": guest.actor_id,
                    "reason": f"{reason}: the actor crashed (only sys.exit(0) and "
                    "exit_actor() end an actor on purpose)",
                },
            )
        return self.executor.error_reply(
            spec, ActorDiedError(spec.actor_id.hex(), reason), app=False
        )

    # -- ends ------------------------------------------------------------------------------
    def _drop(self, guest: Guest) -> None:
        """Forgets the guest: its queued calls fail with ActorDiedError, its state is freed
        (a call still running finishes in its thread; its reply says the actor died)."""
        with self.lock:
            guest.gone = True
            queued = list(guest.mailbox)
            guest.mailbox.clear()
            if self.guests.get(guest.actor_id) is guest:
                del self.guests[guest.actor_id]
            self.ended[guest.actor_id] = guest.exit_reason or "it ended"
            while len(self.ended) > ENDED_KEPT:
                self.ended.popitem(last=False)
        guest.instance = None
        guest.bound.clear()
        for spec, reply_to in queued:
            if spec is not None:
                reply_to.resolve_threadsafe(self._died_reply(spec, guest))
        self._retitle()

    def _died_reply(self, spec: TaskSpec, guest: Guest | None) -> dict:
        why = guest.exit_reason if guest is not None else self.ended.get(spec.actor_id, "")
        error = ActorDiedError(spec.actor_id.hex(), why or "the actor is not in this process")
        return self.executor.error_reply(spec, error, app=False)

    def _retitle(self) -> None:
        """The host's title on the Machines page and in ``ps``: how many actors it holds."""
        count = len(self.guests)
        if count == self._title_count:
            return
        self._title_count = count
        title = f"shared actors host ({count} actor{'s' if count != 1 else ''})"
        self.host.send_threadsafe(
            self.host.raylet, "worker_title", {"worker_id": self.host.worker_id, "title": title}
        )
