"""The core worker: the runtime inside every driver and worker process.

Threads: the user's thread (or, in a worker, the main thread running tasks) calls ``put``,
``get``, ``submit_*``; one I/O thread runs a uvloop event loop with every connection (raylet,
GCS, leased workers, actors, owners and borrowers). State shared between them lives in the
thread-safe memory store and reference counter; everything else is touched on the I/O thread
only, reached with ``loop.call_soon_threadsafe``.

Every core worker listens on a Unix socket so owners, borrowers and callers can reach it. A
connection between two core workers is used in both directions (``hello`` names the caller),
so the messages between two processes stay in order whoever opened the socket.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import os
import sys
import threading
import time
from collections import deque
from typing import Any

from ember import config, global_state
from ember.call_site import user_call_site
from ember.cluster_token import read_token
from ember.core_worker.actor_submitter import ActorSubmitter
from ember.core_worker.cluster_links import ClusterLinks
from ember.core_worker.event_export import EventExporter
from ember.core_worker.lineage import Lineage
from ember.core_worker.locations import error_location, lost_location
from ember.core_worker.memory_store import MemoryStore
from ember.core_worker.reference_counter import Ref, ReferenceCounter
from ember.core_worker.task_attempts import should_retry_app_error
from ember.core_worker.task_spec import ACTOR_TASK, ARG_INLINE, ARG_REF, TaskSpec
from ember.core_worker.task_submitter import TaskSubmitter
from ember.exceptions import (
    GetTimeoutError,
    ObjectLostError,
    OwnerDiedError,
    PendingCallsLimitExceeded,
    TaskError,
)
from ember.ids import (
    TASK_ID_SIZE,
    actor_handle_object_id,
    new_task_id,
    new_unique_id,
    object_id_for_put,
)
from ember.log_monitor import print_worker_lines
from ember.object_ref import ObjectRef, counted_ref
from ember.object_store.arena import Arena
from ember.protocol import connection as conn_mod
from ember.protocol.connection import Connection
from ember.serialization import (
    META_ERROR,
    SerializedObject,
    deserialize,
    serialize,
    serialize_error,
    unpack_from,
)

logger = logging.getLogger(__name__)

DRIVER, WORKER = "driver", "worker"


class CoreWorker:
    def __init__(
        self,
        *,
        mode: str,
        node: dict[str, Any],
        job_id: bytes,
        worker_id: bytes | None = None,
        namespace: str = "",
        log_to_driver: bool = True,
        register_extra: dict | None = None,
    ) -> None:
        self.mode = mode
        if mode == WORKER:
            config.apply_logging_level()  # the level ember.init() gave the node
        self.node = node  # {node_id, session_dir, raylet_address, gcs_address, arena_path, ...}
        self.node_id: bytes = node["node_id"]
        self.node_id_hex = self.node_id.hex()
        self.job_id = job_id
        self.worker_id = worker_id or new_unique_id()
        self.namespace = namespace
        self.log_to_driver = log_to_driver
        self.register_extra = register_extra or {}
        self.local_mode = False
        # Where the driver imports from, so workers can import what its functions reference
        # (Ray adds the driver's script and working directories to workers' sys.path too).
        self.code_path: list[str] = _driver_code_path() if mode == DRIVER else []
        self.actor_id: bytes | None = None
        self.address = f"unix:{node['session_dir']}/sockets/w-{self.worker_id.hex()[:16]}"
        self.owner_address = (self.worker_id, self.address, self.node_id)
        self.memory_store = MemoryStore()
        # Ids of ObjectRefs garbage-collected since the last drain (appended lock-free).
        self.dropped_refs: deque[bytes] = deque()
        self.refs = ReferenceCounter(self.worker_id, self._on_free, self._on_borrow_released)
        self.loop = conn_mod.new_event_loop()
        self.task_submitter = TaskSubmitter(self)
        self.actor_submitter = ActorSubmitter(self)
        self.links = ClusterLinks(self)  # other nodes: spillback, pulls, deaths
        self.lineage = Lineage(self)  # how to re-run tasks whose results a node may lose
        self.executor = None  # set by the worker main
        self.raylet: Connection = None  # type: ignore[assignment]
        self.gcs: Connection = None  # type: ignore[assignment]
        self._peers: dict[bytes, Connection] = {}  # {worker_id: connection either way}
        self._connecting: dict[bytes, asyncio.Future] = {}
        self._functions: dict[bytes, bytes] = {}  # {function_id: pickled function}
        self._put_index = itertools.count(1)
        self._thread: threading.Thread | None = None
        self._server = None
        self._arena = None
        self.current = threading.local()  # .task_id, .actor_id, .spec
        self.root_task_id = new_task_id()
        self.events: deque = deque(maxlen=config.task_events_buffer_size)
        # Actor calls made on handles with max_pending_calls, until each is done.
        self._limited_calls: dict[bytes, bytes] = {}  # {task_id: actor_id}
        self._limited_pending: dict[bytes, int] = {}  # {actor_id: calls pending}
        self._limited_lock = threading.Lock()
        self.events_dropped = 0
        self.shutting_down = False
        self._creation_holds: dict[bytes, list] = {}  # {actor_id: argument refs held}
        self._handle_objects: dict[bytes, bytes] = {}  # {handle object id: actor id}
        # Actors created here that outlive their handles (detached or named).
        self._unscoped_actors: set[bytes] = set()
        # {object_id: (live zero-copy views, size)}: a value backed by shared memory pins it
        # (PINNED_IN_MEMORY in ember memory, even after its ObjectRef is gone).
        self._plasma_views: dict[bytes, int] = {}
        self.handlers = {
            "hello": self._h_hello,
            "push_task": self._h_push_task,
            "push_actor_task": self._h_push_actor_task,
            "get_object": self._h_get_object,
            "add_borrower": self._h_add_borrower,
            "remove_borrower": self._h_remove_borrower,
            "get_function": self._h_get_function,
            "cancel_task": self._h_cancel_task,
            "actor_update": self._h_actor_update,
            "log_lines": self._h_log_lines,
            "warning": self._h_warning,
            "exit": self._h_exit,
            "create_actor": self._h_create_actor,
            "get_references": self._h_get_references,
            "may_exit": self._h_may_exit,
            "node_dead": self.links.h_node_dead,
            "add_location": self.links.h_add_location,
            "node_added": self.links.h_node_added,
        }

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._run_loop, args=(ready,), name="ember-io", daemon=True
        )
        self._thread.start()
        ready.wait(config.process_start_timeout)
        self.run_sync(self._connect_all(), config.process_start_timeout)
        global_state.worker = self

    def _run_loop(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(ready.set)
        self.loop.call_soon(self._drain_periodically)
        self.loop.run_forever()

    def drain_dropped_refs(self) -> None:
        """Applies the local-count drops that ObjectRef.__del__ queued. Call with no lock held."""
        q = self.dropped_refs
        remove = self.refs.remove_local
        while q:
            try:
                object_id = q.popleft()
            except IndexError:
                return
            remove(object_id)

    def _drain_periodically(self) -> None:
        self.drain_dropped_refs()
        if not self.shutting_down:
            self.loop.call_later(0.05, self._drain_periodically)

    async def _connect_all(self) -> None:
        if self.node.get("token_file"):
            # A cluster node: callers on other nodes reach us over TCP, with the token.
            conn_mod.set_cluster_token(read_token(self.node["token_file"]))
            self.address = f"tcp:{self.node.get('node_ip', '127.0.0.1')}:0"
        self._server, self.address = await conn_mod.serve(
            self.address,
            self.handlers,
            name=f"{self.mode}-server",
            on_close=self._on_peer_closed,
        )
        self.owner_address = (self.worker_id, self.address, self.node_id)
        self.raylet = await conn_mod.connect(
            self.node["raylet_address"],
            self.handlers,
            name="raylet",
            on_close=self._on_raylet_closed,
        )
        self.gcs = await conn_mod.connect(
            self.node["gcs_address"], self.handlers, name="gcs", on_close=self._on_gcs_closed
        )
        if self.node.get("token_file"):  # a cluster: other nodes' deaths matter here
            self.gcs.send("subscribe_node_events")
        await self.raylet.call(
            "register_client",
            {
                "worker_id": self.worker_id,
                "pid": os.getpid(),
                "address": self.address,
                "is_driver": self.mode == DRIVER,
                "job_id": self.job_id,
                "log_to_driver": self.log_to_driver,
                **self.register_extra,
            },
        )
        if self.mode == DRIVER:
            await self.gcs.call(
                "register_job",
                {
                    "job_id": self.job_id,
                    "driver_worker_id": self.worker_id,
                    "driver_pid": os.getpid(),
                    "node_id": self.node_id,
                    "namespace": self.namespace,
                    "entrypoint": " ".join(sys.argv),
                },
            )
            if self.links.wants_remote_logs():
                await self.links.subscribe_all_logs()
        # Task events to the node's agent, for the dashboard (event_export.py says how).
        self.event_exporter = EventExporter(self)
        self.event_exporter.start()

    def shutdown(self) -> None:
        if self.shutting_down:
            return
        self.shutting_down = True
        try:
            self.run_sync(self._close_all(), 5.0)
        except Exception:
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        if self._thread is not None:
            self._thread.join(5.0)
        if global_state.worker is self:
            global_state.worker = None

    async def _close_all(self) -> None:
        self.task_submitter.release_all()
        exporter = getattr(self, "event_exporter", None)
        if exporter is not None:
            await exporter.stop()  # flushes: a short driver's last events reach the agent
        if self.mode == DRIVER and self.gcs is not None and not self.gcs.closed:
            try:
                await self.gcs.call("job_finished", {"job_id": self.job_id}, timeout=2.0)
            except Exception:
                pass
        for c in list(self._peers.values()) + [self.raylet, self.gcs]:
            if c is not None:
                c.close("shutdown")
        self.links.close()
        if self._server is not None:
            self._server.close()
        if self.address.startswith("unix:"):
            try:
                os.unlink(self.address[len("unix:") :])
            except OSError:
                pass

    def run_sync(self, coro, timeout: float | None) -> Any:
        """Runs a coroutine on the I/O thread and waits for it (from any other thread)."""
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise

    def call_raylet_sync(self, op: str, body: Any, timeout: float = 30.0) -> Any:
        if self.dropped_refs:
            self.drain_dropped_refs()  # frees go out before this call, on the same connection
        return self.run_sync(self.raylet.call(op, body), timeout)

    def call_gcs_sync(self, op: str, body: Any, timeout: float | None = None) -> Any:
        if self.dropped_refs:
            self.drain_dropped_refs()
        return self.run_sync(self.gcs.call(op, body), timeout or config.gcs_rpc_timeout)

    def _on_raylet_closed(self, conn: Connection) -> None:
        if not self.shutting_down and self.mode == DRIVER:
            self.links.on_node_lost(conn.close_reason)
        if not self.shutting_down and self.mode == WORKER:
            # The node is going away; a worker has nothing left to do.
            logger.info("raylet connection closed (%s); worker exiting", conn.close_reason)
            os._exit(0)

    def _on_gcs_closed(self, conn: Connection) -> None:
        if not self.shutting_down:
            logger.warning("lost the connection to the GCS: %s", conn.close_reason)
            if self.mode == DRIVER:
                self.links.on_gcs_lost(conn.close_reason)

    # -- connections between core workers --------------------------------------------------
    def _h_hello(self, conn: Connection, body: dict) -> None:
        wid = body["worker_id"]
        conn.state["peer"] = wid
        self._peers.setdefault(wid, conn)

    def _on_peer_closed(self, conn: Connection) -> None:
        wid = conn.state.get("peer")
        if wid is not None and self._peers.get(wid) is conn:
            del self._peers[wid]
            # A borrower that died holds nothing any more.
            self.refs.remove_borrower_everywhere(wid)

    async def connect_to_worker(self, worker_id: bytes | None, address: str) -> Connection:
        if worker_id is not None:
            conn = self._peers.get(worker_id)
            if conn is not None and not conn.closed:
                return conn
            pending = self._connecting.get(worker_id)
            if pending is not None:
                return await asyncio.shield(pending)
        fut = self.loop.create_future()
        if worker_id is not None:
            self._connecting[worker_id] = fut
        try:
            conn = await conn_mod.connect(
                address, self.handlers, name=f"peer:{address}", on_close=self._on_peer_closed
            )
            conn.send("hello", {"worker_id": self.worker_id})
            if worker_id is not None:
                conn.state["peer"] = worker_id
                self._peers[worker_id] = conn
            fut.set_result(conn)
            return conn
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()  # mark retrieved
            raise
        finally:
            if worker_id is not None:
                self._connecting.pop(worker_id, None)

    async def _owner_conn(self, owner) -> Connection:
        return await self.connect_to_worker(owner[0], owner[1])

    # -- ownership helpers -----------------------------------------------------------------
    def owns(self, object_id: bytes) -> bool:
        ref = self.refs.get(object_id)
        return ref is not None and ref.owned

    def _on_free(self, object_id: bytes, ref: Ref) -> None:
        loc = self.memory_store.delete(object_id)
        copies = self.links.take_copies(object_id, loc)
        if self.lineage.specs:
            self.lineage.forget(object_id)
        if ref.is_actor_handle:
            self.loop.call_soon_threadsafe(self._actor_out_of_scope, object_id)
        if copies and not self.shutting_down:
            if self.node_id in copies:
                self._send_threadsafe(self.raylet, "plasma_delete", {"object_ids": [object_id]})
            if len(copies) > 1 or self.node_id not in copies:  # copies on other nodes too
                self.loop.call_soon_threadsafe(self.links.delete_remote, object_id, copies)

    def _on_borrow_released(self, object_id: bytes, owner) -> None:
        self.memory_store.delete(object_id)
        if not self.shutting_down:
            self.loop.call_soon_threadsafe(self._send_remove_borrower, object_id, owner)

    def _send_remove_borrower(self, object_id: bytes, owner) -> None:
        async def send() -> None:
            try:
                conn = await self._owner_conn(owner)
                conn.send("remove_borrower", {"object_id": object_id, "borrower": self.worker_id})
            except Exception:
                pass  # the owner is gone; nothing to release

        asyncio.ensure_future(send())

    def _send_threadsafe(self, conn: Connection | None, op: str, body: Any) -> None:
        if conn is None or self.loop.is_closed():
            return
        try:
            conn.send_threadsafe(op, body)
        except RuntimeError:
            pass  # loop closed during interpreter shutdown

    def own_actor_handle_object(self, actor_id: bytes) -> None:
        """A new actor created here: its handle object, whose count is the actor's handle
        count, is owned here; when it is freed the actor ends (``_actor_out_of_scope``)."""
        handle_oid = actor_handle_object_id(actor_id)
        self._handle_objects[handle_oid] = actor_id
        self.refs.add_owned(handle_oid, self.owner_address)
        self.refs.mark_actor_handle(handle_oid)

    def _actor_out_of_scope(self, handle_object_id: bytes) -> None:
        actor_id = self._handle_objects.pop(handle_object_id, None)
        if actor_id is None or self.gcs is None or self.gcs.closed:
            return
        if actor_id in self._unscoped_actors:
            return
        # Calls this process already made still run: the actor ends after them.
        if self.actor_submitter.end_after_calls(actor_id):
            return
        self.gcs.send(
            "kill_actor",
            {
                "actor_id": actor_id,
                "no_restart": True,
                "graceful": True,
                "reason": "all references to the actor were removed",
                "only_if_not_detached": True,
            },
        )

    def register_new_borrows(self) -> None:
        """Registers refs just deserialized with their owners; waits for their acks."""
        pending = self.refs.take_new_borrows()
        if not pending:
            return
        by_owner: dict[bytes, tuple[Any, list[bytes]]] = {}
        for object_id, owner in pending:
            self.refs.add_local(object_id, owner)  # hold until the ObjectRef takes over
            by_owner.setdefault(owner[0], (owner, []))[1].append(object_id)

        async def register() -> None:
            async def one(owner, ids):
                try:
                    conn = await self._owner_conn(owner)
                    await conn.call(
                        "add_borrower", {"object_ids": ids, "borrower": self.worker_id}, 10.0
                    )
                except Exception:
                    for oid in ids:
                        self.memory_store.put(oid, lost_location(oid, OwnerDiedError))

            await asyncio.gather(*(one(o, ids) for o, ids in by_owner.values()))

        try:
            self.run_sync(register(), 15.0)
        finally:
            for object_id, _ in pending:
                self.refs.remove_local(object_id)

    def _h_add_borrower(self, conn: Connection, body: dict) -> list[bool]:
        borrower = body["borrower"]
        return [self.refs.add_borrower(oid, borrower) for oid in body["object_ids"]]

    def _h_remove_borrower(self, conn: Connection, body: dict) -> None:
        self.refs.remove_borrower(body["object_id"], body["borrower"], body.get("count", 1))

    # -- put / get / wait ------------------------------------------------------------------
    def current_task_id(self) -> bytes:
        return getattr(self.current, "task_id", None) or self.root_task_id

    def put(self, value: Any) -> ObjectRef:
        if isinstance(value, ObjectRef):
            raise TypeError(
                "Calling put() on an ObjectRef is not allowed: the ref already names the "
                "object. Pass the ref itself, or put([ref]) to nest it in a new object."
            )
        if self.dropped_refs:
            self.drain_dropped_refs()
        object_id = object_id_for_put(self.current_task_id(), next(self._put_index))
        ser = serialize(value, what="the value passed to put()")
        # Values with out-of-band buffers (numpy arrays) always go to shared memory, so
        # get() reads them zero-copy whatever their size, as the seeds document.
        loc = self.store_serialized(object_id, ser, self.owner_address, zero_copy=bool(ser.buffers))
        self.refs.add_owned(
            object_id, self.owner_address, ser.contained, user_call_site(), ser.total_size
        )
        self.memory_store.put(object_id, loc)
        return ObjectRef(object_id, self.owner_address)

    def store_serialized(
        self, object_id: bytes, ser: SerializedObject, owner, zero_copy: bool = False
    ) -> tuple:
        """Inline for small values; the node's shared-memory store for large ones."""
        if not zero_copy and ser.total_size <= config.max_direct_call_object_size:
            return ("inline", ser.meta, ser.data, [memoryview(b).tobytes() for b in ser.buffers])
        size = ser.packed_size()
        offset = self.call_raylet_sync(
            "plasma_create",
            {"object_id": object_id, "size": size, "owner": owner, "client": self.worker_id},
        )
        view = self.arena.writable_view(offset, size)
        try:
            ser.pack_into(view)
        finally:
            view.release()
        self._send_threadsafe(self.raylet, "plasma_seal", {"object_id": object_id})
        return ("plasma", self.node_id, size)

    @property
    def arena(self):
        if self._arena is None:
            self._arena = Arena(self.node["arena_path"], self.node["arena_capacity"])
        return self._arena

    def get(self, refs: list[ObjectRef], timeout: float | None = None) -> list[Any]:
        if self.dropped_refs:
            self.drain_dropped_refs()
        if len(refs) == 1:
            ref = refs[0]
            loc = self.memory_store.get_if_ready(ref._id) or self._wait_one(ref, timeout)
            return [self.materialize(ref._id, loc)]
        locs = self.wait_locations(refs, timeout)
        return [self.materialize(r._id, loc) for r, loc in zip(refs, locs, strict=True)]

    def _wait_one(self, ref: ObjectRef, timeout: float | None) -> tuple:
        """One ref: a lock to sleep on instead of the general countdown."""
        done = threading.Lock()
        done.acquire()
        box: list = []

        def on_ready(_oid, value) -> None:
            box.append(value)
            done.release()

        self._ensure_resolving(ref)
        self.memory_store.on_ready(ref._id, on_ready)
        blocked = self._notify_blocked() if not box else False
        try:
            if not done.acquire(timeout=-1 if timeout is None else timeout):
                self.memory_store.remove_waiter(ref._id, on_ready)
                if box:
                    return box[0]
                raise GetTimeoutError(
                    f"get() timed out after {timeout} s: the object {ref.hex()} was not ready"
                )
        finally:
            if blocked:
                self._notify_unblocked()
        return box[0]

    def wait_locations(self, refs: list[ObjectRef], timeout: float | None) -> list[tuple]:
        """Waits until every ref's value (or its location) is known here."""
        store = self.memory_store
        locs: list[Any] = [store.get_if_ready(r._id) for r in refs]
        missing = [i for i, loc in enumerate(locs) if loc is None]
        if not missing:
            return locs
        event = threading.Event()
        # One waiter per distinct object: a ref listed twice is waited for once.
        waiting = {refs[i]._id: refs[i] for i in missing}
        remaining = {"n": len(waiting)}
        lock = threading.Lock()

        def on_ready(_oid, _value) -> None:
            with lock:
                remaining["n"] -= 1
                if remaining["n"] <= 0:
                    event.set()

        self._ensure_resolving_many(waiting.values())
        store.on_ready_many(list(waiting), on_ready)
        blocked = self._notify_blocked()
        try:
            if not event.wait(timeout):
                store.remove_waiter_many(waiting, on_ready)
                raise GetTimeoutError(
                    f"get() timed out after {timeout} s: {remaining['n']} of {len(refs)} "
                    f"objects were not ready (first: {refs[missing[0]].hex()})"
                )
        finally:
            if blocked:
                self._notify_unblocked()
        return [store.get_if_ready(r._id) for r in refs]

    def _ensure_resolving_many(self, refs) -> None:
        contains = self.memory_store.contains
        for ref in refs:
            if not contains(ref._id):
                self._ensure_resolving(ref)

    def _ensure_resolving(self, ref: ObjectRef) -> None:
        """A ref we do not own and know nothing of: ask its owner (once)."""
        if self.memory_store.contains(ref._id):
            return
        owner = ref._owner
        self.memory_store.add_pending(ref._id)
        if owner is None or owner[0] == self.worker_id:
            if not self.owns(ref._id):
                self.memory_store.put(
                    ref._id,
                    lost_location(ref._id, ObjectLostError, "its owner no longer has it"),
                )
            return
        self.loop.call_soon_threadsafe(self._fetch_from_owner, ref._id, owner)

    def _fetch_from_owner(self, object_id: bytes, owner) -> None:
        async def fetch() -> None:
            try:
                conn = await self._owner_conn(owner)
                loc = await conn.call("get_object", {"object_id": object_id})
            except Exception as e:
                loc = lost_location(object_id, OwnerDiedError, f"its owner is unreachable: {e}")
            self.memory_store.put(object_id, loc)

        asyncio.ensure_future(fetch())

    def _h_get_object(self, conn: Connection, body: dict):
        object_id = body["object_id"]
        loc = self.memory_store.get_if_ready(object_id)
        if loc is not None:
            return self.links.best_location(object_id, loc) if self.links.dead_nodes else loc
        if not self.refs.has(object_id):
            return lost_location(object_id, ObjectLostError, "it was freed")
        fut = self.loop.create_future()

        def on_ready(_oid, value) -> None:
            self.loop.call_soon_threadsafe(_set_result, fut, value)

        self.memory_store.on_ready(object_id, on_ready)
        return fut

    def materialize(self, object_id: bytes, loc: tuple) -> Any:
        """A value from its location; raises the stored error of a failed task."""
        if loc[0] == "inline":
            meta, data, buffers = loc[1], loc[2], loc[3]
            value = deserialize(data, buffers)
        elif loc[0] == "plasma":
            meta, value = self._read_plasma(object_id, loc)
        else:
            raise ObjectLostError(object_id.hex(), f"unknown location {loc[0]!r}")
        self.register_new_borrows()
        if meta == META_ERROR:
            if isinstance(value, TaskError):
                raise value.as_instanceof_cause()
            raise value
        return value

    def _read_plasma(self, object_id: bytes, loc: tuple) -> tuple[int, Any]:
        node_id = loc[1]
        if node_id != self.node_id:
            ref = self.refs.get(object_id)
            owner = ref.owner if ref is not None else None
            why = self.links.pull_to_local(object_id, node_id, loc[2], owner)
            if why:
                rebuilt = self.lineage.reconstruct(object_id)
                if rebuilt is not None:
                    return rebuilt
                raise ObjectLostError(object_id.hex(), f"its only copies are gone: {why}")
        got = self.call_raylet_sync(
            "plasma_get", {"object_id": object_id, "client": self.worker_id}
        )
        if got is None:
            raise ObjectLostError(object_id.hex(), "its shared-memory copy is gone")
        offset, size = got
        raylet = self.raylet
        worker = self

        def release() -> None:
            if not worker.shutting_down:
                worker._send_threadsafe(
                    raylet, "plasma_release", {"object_id": object_id, "client": worker.worker_id}
                )

        views = self._plasma_views
        views[object_id] = (views.get(object_id, (0, size))[0] + 1, size)

        def release_and_count() -> None:
            left = views.get(object_id, (1, size))[0] - 1
            if left > 0:
                views[object_id] = (left, size)
            else:
                views.pop(object_id, None)
            release()

        view = self.arena.view(offset, size, on_release=release_and_count)
        meta, data, buffers = unpack_from(view)
        value = deserialize(data, buffers)
        return meta, value

    def wait(
        self,
        refs: list[ObjectRef],
        num_returns: int,
        timeout: float | None,
        fetch_local: bool = True,
    ) -> tuple[list[ObjectRef], list[ObjectRef]]:
        """Ray's wait: a ref is ready once its object exists; with ``fetch_local`` only once
        it is on this node too, so an object in another node's shared memory is pulled
        here first (the pull starts now and finishes even if the wait times out first)."""
        get_if_ready = self.memory_store.get_if_ready
        node_id = self.node_id
        ready_at: list[int] = []  # positions in refs of the first ready ones
        remote: list[tuple[ObjectRef, Any]] = []  # made on another node: to pull first
        unknown: list[ObjectRef] = []
        for i, r in enumerate(refs):
            loc = get_if_ready(r._id)
            if loc is None:
                unknown.append(r)
            elif fetch_local and loc[0] == "plasma" and loc[1] != node_id:
                remote.append((r, loc))
            else:
                ready_at.append(i)
                # Only the first num_returns ready refs (in list order) are returned, so the
                # rest need no look: a loop that waits on 1,000 refs one by one stays linear.
                if len(ready_at) >= num_returns:
                    break
        if len(ready_at) < num_returns and (remote or (unknown and timeout != 0)):
            ready_ids = {refs[i]._id for i in ready_at}
            self._wait_for_more(ready_ids, remote, unknown, num_returns, timeout, fetch_local)
            ready_at = [i for i, r in enumerate(refs) if r._id in ready_ids][:num_returns]
        ready = [refs[i] for i in ready_at]
        not_ready: list[ObjectRef] = []
        start = 0
        for i in ready_at:
            not_ready += refs[start:i]
            start = i + 1
        not_ready += refs[start:]
        return ready, not_ready

    def _wait_for_more(
        self,
        ready_ids: set[bytes],
        remote: list[tuple[ObjectRef, Any]],
        unknown: list[ObjectRef],
        num_returns: int,
        timeout: float | None,
        fetch_local: bool,
    ) -> None:
        """wait's slow path: adds to ``ready_ids`` what becomes ready (or is pulled here)
        before ``num_returns`` are or ``timeout`` passes."""
        store = self.memory_store
        event = threading.Event()
        lock = threading.Lock()
        done: set[bytes] = set(ready_ids)

        def mark_ready(oid: bytes) -> None:
            with lock:
                if oid not in done:
                    done.add(oid)
                    if len(done) >= num_returns:
                        event.set()

        owners = {r._id: r._owner for r in unknown}

        def on_ready(oid: bytes, loc: Any) -> None:
            if fetch_local and loc[0] == "plasma" and loc[1] != self.node_id:
                self._pull_for_wait(oid, loc, owners.get(oid), mark_ready)
            else:
                mark_ready(oid)

        for r, loc in remote:
            self._pull_for_wait(r._id, loc, r._owner, mark_ready)
        if timeout != 0:
            waiting = [r._id for r in unknown]
            self._ensure_resolving_many(unknown)
            store.on_ready_many(waiting, on_ready)
            blocked = self._notify_blocked()
            try:
                event.wait(timeout)
            finally:
                if blocked:
                    self._notify_unblocked()
            store.remove_waiter_many(waiting, on_ready)
        with lock:
            ready_ids.update(done)

    def _pull_for_wait(self, object_id: bytes, loc: tuple, owner: Any, done) -> None:
        """Has the local raylet copy an object from another node's store, then ``done(id)``.

        The same pull as ``get``'s (every known copy, retries; its raylet call has a
        deadline), on a thread of its own so the caller's wait can time out meanwhile. A
        failed pull counts as done too: the object is then lost or unreadable, and ``get``
        (which retries, or rebuilds it) says which, as Ray's wait returns lost objects."""

        def pull() -> None:
            try:
                self.links.pull_to_local(object_id, loc[1], loc[2], owner)
            except Exception as e:
                logger.debug("wait(fetch_local=True): pull of %s failed: %s", object_id.hex(), e)
            done(object_id)

        _PULL_POOL.submit(pull)

    def object_future(self, ref: ObjectRef) -> concurrent.futures.Future:
        fut: concurrent.futures.Future = concurrent.futures.Future()

        def on_ready(oid, loc) -> None:
            # Deserialize off the I/O thread: a plasma read calls the raylet synchronously.
            def resolve() -> None:
                try:
                    fut.set_result(self.materialize(oid, loc))
                except BaseException as e:
                    fut.set_exception(e)

            if threading.current_thread() is self._thread:
                _FUTURE_POOL.submit(resolve)
            else:
                resolve()

        self._ensure_resolving(ref)
        # Keep the ref alive until the future resolves.
        fut._ember_ref = ref  # type: ignore[attr-defined]
        self.memory_store.on_ready(ref._id, on_ready)
        return fut

    def _notify_blocked(self) -> bool:
        """A worker running a task gives its CPU back while it waits (nested tasks)."""
        if self.mode != WORKER or getattr(self.current, "task_id", None) is None:
            return False
        if getattr(self.current, "is_actor", False):
            return False
        self._send_threadsafe(self.raylet, "worker_blocked", {"worker_id": self.worker_id})
        return True

    def _notify_unblocked(self) -> None:
        self._send_threadsafe(self.raylet, "worker_unblocked", {"worker_id": self.worker_id})

    # -- submitting ------------------------------------------------------------------------
    def encode_args(self, args: tuple, kwargs: dict, fn_name: str) -> tuple[list, tuple, list]:
        """Top-level refs stay refs; values are serialized inline or put in the store."""
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
                ref = self.put(value)  # large values travel through the object store
                encoded.append((ARG_REF, ref._id, ref._owner))
                # Keep the ref until the pending task holds the object (prepare_task).
                holds = getattr(self.current, "submission_holds", None)
                if holds is None:
                    holds = self.current.submission_holds = []
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
        if self.dropped_refs:
            self.drain_dropped_refs()
        owner = self.owner_address
        spec.owner = owner
        spec.parent_task_id = self.current_task_id()
        spec.job_id = self.job_id
        spec.namespace = self.namespace
        oids = spec.return_ids()
        self.refs.add_owned_returns(oids, owner, user_call_site())
        self.memory_store.add_pending_many(oids)
        refs = [counted_ref(oid, owner) for oid in oids]
        if spec.args:
            held = spec.arg_refs()
            if held:
                self.refs.add_submitted(held)
                self.inline_small_args(spec)
        if getattr(self.current, "submission_holds", None):
            self.drop_submission_holds()
        self.record_event(
            spec, "PENDING_ARGS_AVAIL", name=spec.display_name(), actor_id=spec.actor_id
        )
        return refs

    def drop_submission_holds(self) -> None:
        self.current.submission_holds = None

    def submit_task(self, spec: TaskSpec) -> list[ObjectRef]:
        refs = self.prepare_task(spec)
        self.loop.call_soon_threadsafe(self.task_submitter.submit, spec)
        return refs

    def submit_actor_task(self, spec: TaskSpec) -> list[ObjectRef]:
        refs = self.prepare_task(spec)
        if not self.actor_submitter.submit_direct(spec):
            self.loop.call_soon_threadsafe(self.actor_submitter.submit, spec)
        return refs

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
            spec.code_path = self.code_path or None
            sent.add(spec.function_id)

    def _h_get_function(self, conn: Connection, body: dict) -> bytes | None:
        return self._functions.get(body["function_id"])

    # -- replies ---------------------------------------------------------------------------
    def handle_task_reply(self, spec: TaskSpec, reply: dict, retry) -> None:
        """An actor call's reply: retried (``retry(spec)``) if its ``retry_exceptions`` say
        so, else final. (Normal tasks decide this in task_attempts.py.)"""
        if reply.get("error") and reply.get("app_error") and should_retry_app_error(spec, reply):
            spec.attempt += 1
            self.record_event(spec, "RETRYING")
            retry(spec)
            return
        self.complete_task(spec, reply)

    def complete_task(self, spec: TaskSpec, reply: dict) -> None:
        """A task's final reply: its results (or its error) go where its refs can read them."""
        # Bookkeeping first, values last: storing a value wakes the user's thread, which then
        # needs the GIL this thread holds until it goes back to waiting for input.
        for start, event in reply.get("profile") or ():
            self._append_event((spec.task_id, "PROFILE", start, 0, event))
        self._task_done(
            spec,
            "FAILED" if reply.get("error") else "FINISHED",
            {
                "timings": reply.get("timings"),
                "pid": reply.get("pid"),
                "node_id": reply.get("node_id"),
                "function": spec.display_name(),
                "error": reply.get("message"),
                # For the timeline's arrows: who submitted it and whose objects it consumed.
                "parent": spec.parent_task_id.hex(),
                "owner_pid": os.getpid(),
                "arg_tasks": _producer_task_ids(spec),
            },
        )
        returns = reply["returns"]
        if spec.max_retries and not reply.get("error"):
            self.lineage.keep(spec, returns)
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
                    self.raylet.send("plasma_delete", {"object_ids": [oid]})
                for inner_id, inner_owner in inner or ():
                    if inner_owner[0] != self.worker_id:
                        self._send_remove_borrower(inner_id, inner_owner)

    def fail_task(self, spec: TaskSpec, error: BaseException) -> None:
        """The task will not run (again): every return holds ``error``."""
        loc = error_location(error)
        for oid in spec.return_ids():
            if self.refs.has(oid):
                self.memory_store.put(oid, loc)
        self._task_done(spec, "FAILED")

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

    def _task_done(self, spec: TaskSpec, state: str, extra: dict | None = None) -> None:
        if self._limited_calls:  # an empty dict when no handle has max_pending_calls
            self._release_limited_call(spec.task_id)
        held = spec.arg_refs()
        if held:
            self.refs.remove_submitted(held)
        if extra:
            self.record_event(spec, state, **extra)
        else:
            self.record_event(spec, state)

    def cancel(self, ref: ObjectRef, force: bool) -> None:
        task_id = ref.task_id()
        self.loop.call_soon_threadsafe(self.task_submitter.cancel, task_id, force)

    # -- worker side: handlers that the executor serves ------------------------------------
    def _h_push_task(self, conn: Connection, spec: TaskSpec):
        return self.executor.on_push_task(conn, spec)

    def _h_push_actor_task(self, conn: Connection, spec: TaskSpec):
        return self.executor.on_push_actor_task(conn, spec)

    def _h_create_actor(self, conn: Connection, spec: TaskSpec):
        return self.executor.on_create_actor(conn, spec)

    def _h_cancel_task(self, conn: Connection, body: dict) -> None:
        if self.executor is not None:
            self.executor.cancel(body["task_id"], body.get("force", False))

    def _h_exit(self, conn: Connection, body: dict) -> None:
        if self.executor is not None:
            self.executor.request_exit(body or {})

    def _h_actor_update(self, conn: Connection, info: dict) -> None:
        if info["state"] in ("ALIVE", "DEAD") and info["actor_id"] in self._creation_holds:
            self.release_creation_hold(info["actor_id"])
        self.actor_submitter.on_actor_update(info)

    def _h_log_lines(self, conn: Connection, body: dict) -> None:
        print_worker_lines(body)

    def _h_warning(self, conn: Connection, body: dict) -> None:
        print(f"(ember) Warning: {body['message']}", file=sys.stderr, flush=True)

    def _h_may_exit(self, conn: Connection, body: Any) -> bool:
        """The raylet wants to retire this idle worker: not while it owns objects in use."""
        return not any(ref.owned for _, ref in self.refs.snapshot())

    def _h_get_references(self, conn: Connection, body: Any) -> dict:
        return {
            "pid": os.getpid(),
            "worker_id": self.worker_id.hex(),
            "is_driver": self.mode == DRIVER,
            "actor": self.executor.actor_name if self.executor is not None else "",
            "rows": self.reference_table(),
        }

    # -- introspection ---------------------------------------------------------------------
    def reference_table(self) -> list[dict]:
        """This process's refs for ``ember memory`` (Ray 0.8's ``ray memory`` table)."""
        rows = []
        snapshot = self.refs.snapshot()
        listed = {object_id for object_id, _ in snapshot}
        for object_id, (n, size) in list(self._plasma_views.items()):
            if object_id not in listed and n > 0:
                rows.append(
                    {
                        "object_id": object_id.hex(),
                        "owned": False,
                        "reference_types": ["PINNED_IN_MEMORY"],
                        "size": size,
                        "status": "-",
                        "call_site": "",
                        "in_plasma": True,
                        "borrowers": 0,
                    }
                )
        for object_id, ref in snapshot:
            loc = self.memory_store.get_if_ready(object_id)
            if ref.is_actor_handle:
                status, size = "-", -1
            elif loc is None:
                status, size = ("PENDING" if ref.owned else "-"), -1
            elif loc[0] == "inline":
                status = "FINISHED"
                size = len(loc[2]) + sum(len(b) for b in loc[3])
            else:
                status, size = "FINISHED", loc[2]
            rows.append(
                {
                    "object_id": object_id.hex(),
                    "owned": ref.owned,
                    "reference_types": self.refs.reference_types(ref),
                    "size": size if size >= 0 else ref.size,
                    "status": status,
                    "call_site": ref.call_site,
                    "in_plasma": bool(loc and loc[0] == "plasma"),
                    "borrowers": len(ref.borrowers or ()),
                }
            )
        return rows

    def record_event(self, spec: TaskSpec, state: str, **extra: Any) -> None:
        self._append_event((spec.task_id, state, time.time(), spec.attempt, extra or None))

    def _append_event(self, event: tuple) -> None:
        """Into the bounded buffer; the oldest event falls out and is counted as dropped
        (the exporter reports the count to the agent with its next batch)."""
        events = self.events
        if len(events) == events.maxlen:
            self.events_dropped += 1
        events.append(event)

    def is_actor_task(self, spec: TaskSpec) -> bool:
        return spec.kind == ACTOR_TASK

    def new_pending_object(self) -> ObjectRef:
        """An owned object filled in later by ``fill_object`` (e.g. a placement group's ready)."""
        object_id = object_id_for_put(self.current_task_id(), next(self._put_index))
        self.refs.add_owned(object_id, self.owner_address)
        self.memory_store.add_pending(object_id)
        return ObjectRef(object_id, self.owner_address)

    def fill_object(self, object_id: bytes, value: Any, is_error: bool = False) -> None:
        ser = serialize_error(value) if is_error else serialize(value)
        if self.refs.has(object_id):
            self.memory_store.put(object_id, ("inline", ser.meta, ser.data, []))

    def gcs_send_threadsafe(self, op: str, body: Any) -> None:
        self._send_threadsafe(self.gcs, op, body)

    def record_profile(self, name: str, start: float, end: float, extra: dict) -> None:
        """A span of ``ember.profile``; inside a task it travels back with the task's reply."""
        event = {"event_type": name, "end": end, "extra": extra, "pid": os.getpid()}
        spans = getattr(self.current, "profile_spans", None)
        if spans is not None:
            spans.append((start, event))
            return
        task_id = getattr(self.current, "task_id", None) or self.root_task_id
        self._append_event((task_id, "PROFILE", start, 0, event))

    def current_actor_hex(self) -> str:
        return self.actor_id.hex() if self.actor_id else ""

    # -- actors ----------------------------------------------------------------------------
    def create_actor(self, spec: TaskSpec, held: list, unscoped: bool = False) -> None:
        """Registers the actor with the GCS (a taken name fails here) and lets it place it."""
        if unscoped:
            self._unscoped_actors.add(spec.actor_id)
        if held:
            self._creation_holds[spec.actor_id] = held
        self.call_gcs_sync("create_actor", spec)

    def release_creation_hold(self, actor_id: bytes) -> None:
        held = self._creation_holds.pop(actor_id, None)
        if held:
            self.refs.remove_submitted(held)


_FUTURE_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="ember-fut")
# wait(fetch_local=True)'s pulls: as many at once as a raylet runs (more wait their turn).
_PULL_POOL = concurrent.futures.ThreadPoolExecutor(
    max_workers=config.max_concurrent_pulls, thread_name_prefix="ember-pull"
)


def _driver_code_path() -> list[str]:
    paths = [os.getcwd()]
    if sys.argv and sys.argv[0]:
        paths.append(os.path.dirname(os.path.abspath(sys.argv[0])))
    paths.extend(p for p in sys.path if p and os.path.isdir(p))
    seen: set[str] = set()
    return [p for p in paths if not (p in seen or seen.add(p))]


def _set_result(fut: asyncio.Future, value: Any) -> None:
    if not fut.done():
        fut.set_result(value)


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
