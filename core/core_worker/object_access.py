"""This process's view of objects: ``put``, ``get``, ``wait`` and futures, on any thread.

Values live in the memory store as locations (``locations.py``): small ones inline, large
ones in a node's shared-memory store. ``get`` waits for a location, then materializes the
value (reading shared memory zero-copy, pulling it from another node first, or having
lineage rebuild it if every copy is gone). A ref this process neither owns nor has seen is
resolved by asking its owner (``get_object``), which answers once the value exists.

A worker running a normal task that blocks in ``get`` or ``wait`` tells its raylet, which
lends its CPU to other tasks meanwhile (nested tasks would deadlock otherwise).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import threading
import time
from collections import deque
from typing import Any, Protocol

from ember import config
from ember.call_site import user_call_site
from ember.core_worker.locations import lost_location
from ember.core_worker.memory_store import MemoryStore
from ember.core_worker.plasma_pins import PlasmaPins
from ember.core_worker.reference_counter import ReferenceCounter
from ember.exceptions import (
    GetTimeoutError,
    ObjectLostError,
    ObjectStoreFullError,
    ObjectUnknownOwnerError,
    OwnerDiedError,
    TaskError,
)
from ember.ids import object_id_for_put
from ember.object_ref import ObjectRef
from ember.object_store.arena import Arena
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

_FUTURE_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="ember-fut")
# wait(fetch_local=True)'s pulls: as many at once as a raylet runs (more wait their turn).
_PULL_POOL = concurrent.futures.ThreadPoolExecutor(
    max_workers=config.max_concurrent_pulls, thread_name_prefix="ember-pull"
)


class _Links(Protocol):
    dead_nodes: set[bytes]

    def pull_to_local(self, object_id: bytes, node_id: bytes, size: int, owner: Any) -> str: ...
    def best_location(self, object_id: bytes, loc: tuple) -> tuple: ...


class _Lineage(Protocol):
    def reconstruct(
        self, object_id: bytes, timeout: float | None = None
    ) -> tuple[int, Any] | None: ...


class ObjectAccessHost(Protocol):
    """What object access needs of the rest of the core worker."""

    owner_address: Any  # (worker_id, address, node_id): set once the server listens
    raylet: Connection
    io_thread: threading.Thread | None
    shutting_down: bool
    links: _Links
    lineage: _Lineage
    dropped_refs: deque[bytes]  # ids of ObjectRefs collected since the last drain

    def drain_dropped_refs(self) -> None: ...
    def current_task_id(self) -> bytes: ...
    def owns(self, object_id: bytes) -> bool: ...
    def call_raylet_sync(self, op: str, body: Any, timeout: float = 30.0) -> Any: ...
    def run_sync(self, coro: Any, timeout: float | None) -> Any: ...
    def send_threadsafe(self, conn: Connection | None, op: str, body: Any) -> None: ...
    def give_back_queued(self) -> None: ...
    def register_new_borrows(self) -> None: ...
    async def connect_to_worker(self, worker_id: bytes | None, address: str) -> Connection: ...


class ObjectAccess:
    def __init__(
        self,
        host: ObjectAccessHost,
        *,
        node: dict[str, Any],
        worker_id: bytes,
        is_worker: bool,
        current: threading.local,
        memory_store: MemoryStore,
        refs: ReferenceCounter,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        # Waits in get/wait that lent this worker's CPU out (the task submitter reads it).
        self.blocked_waits = 0
        self.host = host
        self._node = node
        self.node_id: bytes = node["node_id"]
        self.worker_id = worker_id
        self._is_worker = is_worker
        self._current = current
        self.memory_store = memory_store
        self.refs = refs
        self.loop = loop
        self._put_index = itertools.count(1)
        self._dropped_refs = host.dropped_refs  # one deque for the process's life
        # The deadline of the get running on this thread, while one with a timeout runs: a
        # rebuild it waits for (lineage) ends there too.
        self._get_deadline = threading.local()
        self._arena: Arena | None = None
        self.pins = PlasmaPins(self._send_release, self._call_later)

    @property
    def plasma_views(self) -> dict[bytes, tuple[int, int]]:
        """``{object_id: (live zero-copy views, size)}``: a value backed by shared memory pins
        it (PINNED_IN_MEMORY in ember memory, even after its ObjectRef is gone)."""
        return self.pins.views()

    def _send_release(self, object_id: bytes, offset: int) -> None:
        if not self.host.shutting_down:
            body = {"object_id": object_id, "client": self.worker_id, "offset": offset}
            self.host.send_threadsafe(self.host.raylet, "plasma_release", body)

    def _call_later(self, delay: float, fn: Any) -> None:
        if not self.host.shutting_down:
            self.loop.call_soon_threadsafe(self.loop.call_later, delay, fn)

    def put(self, value: Any) -> ObjectRef:
        if isinstance(value, ObjectRef):
            raise TypeError(
                "Calling put() on an ObjectRef is not allowed: the ref already names the "
                "object. Pass the ref itself, or put([ref]) to nest it in a new object."
            )
        if self._dropped_refs:
            self.host.drain_dropped_refs()
        object_id = object_id_for_put(self.host.current_task_id(), next(self._put_index))
        ser = serialize(value, what="the value passed to put()")
        # Values with out-of-band buffers (numpy arrays) always go to shared memory, so
        # get() reads them zero-copy whatever their size, as in Ray.
        loc = self.store_serialized(
            object_id, ser, self.host.owner_address, zero_copy=bool(ser.buffers)
        )
        self.refs.add_owned(
            object_id, self.host.owner_address, ser.contained, user_call_site(), ser.total_size
        )
        self.memory_store.put(object_id, loc)
        return ObjectRef(object_id, self.host.owner_address)

    def store_serialized(
        self, object_id: bytes, ser: SerializedObject, owner, zero_copy: bool = False
    ) -> tuple:
        """Inline for small values; the node's shared-memory store for large ones."""
        if not zero_copy and ser.total_size <= config.max_direct_call_object_size:
            return ("inline", ser.meta, ser.data, [memoryview(b).tobytes() for b in ser.buffers])
        size = ser.packed_size()
        create = {"object_id": object_id, "size": size, "owner": owner, "client": self.worker_id}
        try:
            offset = self.host.call_raylet_sync("plasma_create", create)
        except ObjectStoreFullError:
            # Pins held here for a next get may keep copies the store could evict.
            if not self.pins.release_idle():
                raise
            offset = self.host.call_raylet_sync("plasma_create", create)
        view = self.arena.writable_view(offset, size)
        try:
            ser.pack_into(view)
        finally:
            view.release()
        self.host.send_threadsafe(self.host.raylet, "plasma_seal", {"object_id": object_id})
        return ("plasma", self.node_id, size)

    @property
    def arena(self):
        if self._arena is None:
            self._arena = Arena(self._node["arena_path"], self._node["arena_capacity"])
        return self._arena

    def new_pending_object(self) -> ObjectRef:
        """An owned object filled in later by ``fill_object`` (e.g. a placement group's ready)."""
        object_id = object_id_for_put(self.host.current_task_id(), next(self._put_index))
        self.refs.add_owned(object_id, self.host.owner_address)
        self.memory_store.add_pending(object_id)
        return ObjectRef(object_id, self.host.owner_address)

    def fill_object(self, object_id: bytes, value: Any, is_error: bool = False) -> None:
        ser = serialize_error(value) if is_error else serialize(value)
        if self.refs.has(object_id):
            self.memory_store.put(object_id, ("inline", ser.meta, ser.data, []))

    def get(self, refs: list[ObjectRef], timeout: float | None = None) -> list[Any]:
        if self._dropped_refs:
            self.host.drain_dropped_refs()
        if timeout is not None:
            self._get_deadline.at = time.monotonic() + timeout
            try:
                return self._get(refs, timeout)
            finally:
                self._get_deadline.at = None
        return self._get(refs, timeout)

    def _get(self, refs: list[ObjectRef], timeout: float | None) -> list[Any]:
        if len(refs) == 1:
            ref = refs[0]
            loc = self.memory_store.get_if_ready(ref._id) or self._wait_one(ref, timeout)
            return [self.materialize(ref._id, loc)]
        locs = self.wait_locations(refs, timeout)
        self._pin_local_batch(locs, refs)
        return [self.materialize(r._id, loc) for r, loc in zip(refs, locs, strict=True)]

    def _pin_local_batch(self, locs: list[tuple], refs: list[ObjectRef]) -> None:
        """Pins, in one raylet call, the objects of a multi-get that are in this node's
        store and not pinned here yet (one call each would cost a round trip each)."""
        node_id, holds = self.node_id, self.pins.holds
        ids = list(
            dict.fromkeys(
                r._id
                for r, loc in zip(refs, locs, strict=True)
                if loc[0] == "plasma" and loc[1] == node_id and not holds(r._id)
            )
        )
        if len(ids) < 2:
            return
        got = self.host.call_raylet_sync(
            "plasma_get_many", {"object_ids": ids, "client": self.worker_id}
        )
        for object_id, pinned in zip(ids, got, strict=True):
            if pinned is not None:  # None: gone; its own get says why
                self.pins.add_idle(object_id, pinned[0], pinned[1])

    def _wait_one(self, ref: ObjectRef, timeout: float | None) -> tuple:
        """One ref: a lock to sleep on instead of the general countdown; or, for a call
        whose reply comes on this thread's own channel, that reply, read here."""
        own = getattr(self.host, "own_replies", None)
        if own is not None:
            deadline = None if timeout is None else time.monotonic() + timeout
            if own.read_own_reply(ref._id, deadline):
                loc = self.memory_store.get_if_ready(ref._id)
                if loc is not None:
                    return loc
                if deadline is not None:
                    timeout = max(0.0, deadline - time.monotonic())
            else:
                own.note_single_wait(ref._id)
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
        # A failed one raises now, as Ray's get does, not once the others are done too.
        for r, loc in zip(refs, locs, strict=True):
            if loc is not None and _is_error(loc):
                self.materialize(r._id, loc)
        event = threading.Event()
        # One waiter per distinct object: a ref listed twice is waited for once.
        waiting = {refs[i]._id: refs[i] for i in missing}
        remaining = {"n": len(waiting)}
        failed: list[bytes] = []
        lock = threading.Lock()

        def on_ready(oid, value) -> None:
            with lock:
                remaining["n"] -= 1
                if _is_error(value):
                    failed.append(oid)
                if remaining["n"] <= 0 or failed:
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
        if failed and remaining["n"] > 0:
            store.remove_waiter_many(waiting, on_ready)
            self.materialize(failed[0], store.get_if_ready(failed[0]))  # raises its error
        return [store.get_if_ready(r._id) for r in refs]

    def _ensure_resolving_many(self, refs, ids: list[bytes] | None = None) -> None:
        missing = self.memory_store.unknown([r._id for r in refs] if ids is None else ids)
        if missing:
            wanted = set(missing)
            for ref in refs:
                if ref._id in wanted:
                    self._ensure_resolving(ref)

    def _ensure_resolving(self, ref: ObjectRef) -> None:
        """A ref we do not own and know nothing of: ask its owner (once)."""
        if self.memory_store.contains(ref._id):
            return
        owner = ref._owner
        self.memory_store.add_pending(ref._id)
        if owner is None:
            if not self.host.owns(ref._id):
                why = "it was made from bare bytes, with no owner address"
                self.memory_store.put(ref._id, lost_location(ref._id, ObjectUnknownOwnerError, why))
            return
        if owner[0] == self.worker_id:
            if not self.host.owns(ref._id):
                self.memory_store.put(
                    ref._id,
                    lost_location(ref._id, ObjectLostError, "its owner no longer has it"),
                )
            return
        if owner[2] in self.host.links.dead_nodes:
            # Its owner's node is gone: no need to wait for a connection that cannot come.
            why = f"its owner's node {owner[2].hex()[:12]} died"
            self.memory_store.put(ref._id, lost_location(ref._id, OwnerDiedError, why))
            return
        self.loop.call_soon_threadsafe(self._fetch_from_owner, ref._id, owner)

    def _fetch_from_owner(self, object_id: bytes, owner) -> None:
        async def fetch() -> None:
            try:
                conn = await self.host.connect_to_worker(owner[0], owner[1])
                loc = await conn.call("get_object", {"object_id": object_id})
            except Exception as e:
                loc = lost_location(object_id, OwnerDiedError, f"its owner is unreachable: {e}")
            self.memory_store.put(object_id, loc)

        asyncio.ensure_future(fetch())

    def h_get_object(self, conn: Connection, body: dict):
        object_id = body["object_id"]
        loc = self.memory_store.get_if_ready(object_id)
        if loc is not None:
            links = self.host.links
            if not links.dead_nodes:
                return loc
            loc = links.best_location(object_id, loc)
            # Every copy died with its node: rebuilt from lineage if it can be, and the
            # borrower answered once it is; else the dead location, which it reports lost.
            if not (
                loc[0] == "plasma"
                and loc[1] in links.dead_nodes
                and self.host.lineage.start_rebuild(object_id)
            ):
                return loc
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
            meta, value = self.read_plasma(object_id, loc)
        else:
            raise ObjectLostError(object_id.hex(), f"unknown location {loc[0]!r}")
        self.host.register_new_borrows()
        if meta == META_ERROR:
            if isinstance(value, TaskError):
                raise value.as_instanceof_cause()
            raise value
        return value

    def read_plasma(self, object_id: bytes, loc: tuple) -> tuple[int, Any]:
        pins = self.pins
        got = pins.acquire(object_id)  # a pin held here: the object is in this node's store
        if got is None:
            if loc[1] != self.node_id:
                rebuilt = self._pull_here(object_id, loc)
                if rebuilt is not None:
                    return rebuilt
            got = self.host.call_raylet_sync(
                "plasma_get", {"object_id": object_id, "client": self.worker_id}
            )
            if got is None:
                self._raise_if_owner_died(object_id)
                raise ObjectLostError(object_id.hex(), "its shared-memory copy is gone")
            pins.add(object_id, got[0], got[1], self.refs.has(object_id))
        offset, size = got
        view = self.arena.view(offset, size, on_release=lambda: pins.release_view(object_id))
        meta, data, buffers = unpack_from(view)
        value = deserialize(data, buffers)
        return meta, value

    def _pull_here(self, object_id: bytes, loc: tuple) -> tuple[int, Any] | None:
        """Copies the object from another node's store into this one's: None once it is
        here, or the value lineage rebuilt when every copy is gone."""
        ref = self.refs.get(object_id)
        owner = ref.owner if ref is not None else None
        try:
            why = self.host.links.pull_to_local(object_id, loc[1], loc[2], owner)
        except ObjectLostError:
            self._raise_if_owner_died(object_id)
            raise
        if not why:
            return None
        deadline = getattr(self._get_deadline, "at", None)
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        rebuilt = self.host.lineage.reconstruct(object_id, left)
        if rebuilt is not None:
            return rebuilt
        self._raise_if_owner_died(object_id)
        raise ObjectLostError(object_id.hex(), f"its only copies are gone: {why}")

    def _raise_if_owner_died(self, object_id: bytes) -> None:
        """Raises OwnerDiedError when the copies of a borrowed object are gone because its
        owner is: the raylets free a dead owner's objects everywhere, and the borrower,
        which may still hold their old location, must say why (as Ray does)."""
        ref = self.refs.get(object_id)
        owner = ref.owner if ref is not None and not ref.owned else None
        if owner is None:
            return
        if owner[2] in self.host.links.dead_nodes:
            raise OwnerDiedError(object_id.hex(), f"its owner's node {owner[2].hex()[:12]} died")

        async def ask_owner() -> None:
            conn = await self.host.connect_to_worker(owner[0], owner[1])
            await conn.call("get_object", {"object_id": object_id}, 5.0)

        try:
            self.host.run_sync(ask_owner(), 10.0)
        except TimeoutError:
            pass  # slow, not known dead (TimeoutError is an OSError: caught first)
        except OSError as e:  # refused, reset, closed: the owner's process is gone
            raise OwnerDiedError(
                object_id.hex(), f"its owner {owner[0].hex()[:12]} died ({e})"
            ) from None
        except Exception:
            pass  # it answered (or is slow): alive, so the copy was lost some other way

    def wait(
        self,
        refs: list[ObjectRef],
        num_returns: int,
        timeout: float | None,
        fetch_local: bool = True,
        ids: list[bytes] | None = None,
    ) -> tuple[list[ObjectRef], list[ObjectRef]]:
        """Ray's wait: a ref is ready once its object exists; with ``fetch_local`` only once
        it is on this node too, so an object in another node's shared memory is pulled
        here first (the pull starts now and finishes even if the wait times out first).
        ``ids``: the refs' ids, when the caller has them already (api.wait's checks)."""
        store = self.memory_store
        get_if_ready = store.get_if_ready
        node_id = self.node_id
        ready_at: list[int] = []  # positions in refs of the first ready ones
        remote: list[tuple[ObjectRef, Any]] = []  # made on another node: to pull first
        unknown: list[ObjectRef] = []
        # Looked over at C speed first: in a loop waiting on a long list one ref at a time,
        # the first ref is mostly ready, and when none is, a Python pass over every ref
        # cost more than the rest of the call.
        if num_returns == 1:
            loc = get_if_ready(refs[0]._id)
            if loc is not None and not (fetch_local and _elsewhere(loc, node_id)):
                return [refs[0]], refs[1:]
        if ids is None:
            ids = [r._id for r in refs]
        generation = store.generation  # before the look: a put during it shows as a change
        first = store.first_ready(ids)
        if first < 0:
            unknown = refs  # nothing ready here yet
        elif num_returns == 1:
            loc = get_if_ready(ids[first])
            if loc is not None and not (fetch_local and _elsewhere(loc, node_id)):
                return [refs[first]], refs[:first] + refs[first + 1 :]
        for i, r in enumerate(refs if first >= 0 else ()):
            loc = get_if_ready(r._id)
            if loc is None:
                unknown.append(r)
            elif fetch_local and _elsewhere(loc, node_id):
                remote.append((r, loc))
            else:
                ready_at.append(i)
                # Only the first num_returns ready refs (in list order) are returned, so the
                # rest need no look: a loop that waits on 1,000 refs one by one stays linear.
                if len(ready_at) >= num_returns:
                    break
        if len(ready_at) < num_returns and (remote or (unknown and timeout != 0)):
            ready_ids = {ids[i] for i in ready_at}
            self._wait_for_more(
                ready_ids,
                remote,
                unknown,
                num_returns,
                timeout,
                fetch_local,
                *((ids, generation) if unknown is refs else (None, None)),
            )
            if len(ready_ids) <= 4:  # C-speed lookups of a few (a loop's one at a time)
                ready_at = sorted(map(ids.index, ready_ids))[:num_returns]
            else:
                ready_at = [i for i, oid in enumerate(ids) if oid in ready_ids][:num_returns]
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
        unknown_ids: list[bytes] | None = None,
        looked_at: int | None = None,
    ) -> None:
        """wait's slow path: adds to ``ready_ids`` what becomes ready (or is pulled here)
        before ``num_returns`` are or ``timeout`` passes. ``unknown_ids``: the ids of
        ``unknown``, when the caller has them; ``looked_at``: the store's generation when
        the caller found none of them ready (the first look is skipped if it still is).

        It watches the whole store (one generation counter) and looks over ``unknown`` again,
        in order, each time something became ready: objects mostly become ready in the order
        they were asked for, so the look usually stops at the first ref, where a callback on
        every ref cost two passes over all of them on every call."""
        store = self.memory_store
        if store.wait_hook is not None:
            store.wait_hook(unknown_ids or [r._id for r in unknown])
        lock = threading.Lock()
        done: set[bytes] = set(ready_ids)
        pulling: set[bytes] = set()

        def pulled(oid: bytes) -> None:
            with lock:
                done.add(oid)
            store.touch()

        def pull(ref: ObjectRef, loc: Any) -> None:
            pulling.add(ref._id)
            self._pull_for_wait(ref._id, loc, ref._owner, pulled)

        for r, loc in remote:
            pull(r, loc)
        deadline = None if timeout is None else time.monotonic() + timeout
        if unknown_ids is None:
            unknown_ids = [r._id for r in unknown]
        if timeout != 0:
            self._ensure_resolving_many(unknown, unknown_ids)
        get_if_ready = store.get_if_ready
        node_id = self.node_id
        blocked = False
        try:
            while True:
                generation = store.generation
                # Refs before the first ready one need no look (pulled ones are in `done`).
                start = -1 if generation == looked_at else store.first_ready(unknown_ids)
                looked_at = None
                for r in itertools.islice(unknown, start, None) if start >= 0 else ():
                    oid = r._id
                    if oid in done or oid in pulling:
                        continue
                    loc = get_if_ready(oid)
                    if loc is None:
                        continue
                    if fetch_local and _elsewhere(loc, node_id):
                        pull(r, loc)
                        continue
                    with lock:
                        done.add(oid)
                    if len(done) >= num_returns:
                        break
                with lock:
                    if len(done) >= num_returns:
                        break
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                if not blocked:
                    blocked = self._notify_blocked()
                store.wait_for_change(generation, left)
        finally:
            if blocked:
                self._notify_unblocked()
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
                self.host.links.pull_to_local(object_id, loc[1], loc[2], owner)
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

            if threading.current_thread() is self.host.io_thread:
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
        if not self._is_worker or getattr(self._current, "task_id", None) is None:
            return False
        if getattr(self._current, "is_actor", False):
            return False
        self.blocked_waits += 1
        self.host.send_threadsafe(self.host.raylet, "worker_blocked", {"worker_id": self.worker_id})
        self.host.give_back_queued()  # a task pushed behind this one may be what it waits for
        return True

    def _notify_unblocked(self) -> None:
        self.blocked_waits -= 1
        self.host.send_threadsafe(
            self.host.raylet, "worker_unblocked", {"worker_id": self.worker_id}
        )


def _set_result(fut: asyncio.Future, value: Any) -> None:
    if not fut.done():
        fut.set_result(value)


def _elsewhere(loc: Any, node_id: bytes) -> bool:
    """Whether a ready object lives in another node's shared memory (``wait`` pulls it first)."""
    return loc[0] == "plasma" and loc[1] != node_id


def _is_error(loc: Any) -> bool:
    """Whether a location holds a failed task's error (errors are always inline)."""
    return loc[0] == "inline" and loc[1] == META_ERROR
