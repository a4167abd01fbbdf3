"""The owner's side of generator tasks: the items a generator task yields reach its caller
here, one ``generator_item`` message each, before the task's reply.

A streaming task (``num_returns="streaming"``, a generator function's default) has a
``Stream``: its items become objects this process owns as they arrive, each held by the
stream until ``ObjectRefGenerator`` hands it out (the count moves to the ObjectRef it
returns) or the generator is dropped (``drop``: what was not handed out is freed, and what
arrives later is thrown away). A dynamic task's items (``num_returns="dynamic"``) are held
until the task's reply is stored: the ``DynamicObjectRefGenerator`` it returns then holds
them, since it contains their refs.

Item ``i`` is object ``i + 2`` of its task (object 1 is the task's own return, which
``completed()`` names). The executor sends an attempt's items before its reply, on the
connection the task came in on (``generators.py``), so when the reply is handled here the
stream has every item. A retried task skips the items its caller already has
(``TaskSpec.generator_skip``, kept current here): an item is delivered once.

``wait`` and ``__anext__`` wait for the next item through a *probe*: a synthetic object in the
memory store, filled once that item arrived or the stream ended. Items and ends arrive on
the I/O thread; ``peek`` and ``take`` run on the user's, so each stream has a lock.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from ember.call_site import user_call_site
from ember.core_worker.memory_store import MemoryStore
from ember.core_worker.reference_counter import ReferenceCounter
from ember.core_worker.task_spec import GEN_DYNAMIC, TaskSpec
from ember.ids import object_id_for_return
from ember.object_ref import ObjectRef, counted_ref
from ember.protocol.connection import Connection
from ember.serialization import serialize

# Probe ids: the task's id with an index no return or put uses.
_PROBE_FLAG = 0x4000_0000
# What a probe holds, and a streaming task's own return when it ended well (as Ray: None).
_NONE = serialize(None)
NONE_LOCATION = ("inline", _NONE.meta, _NONE.data, [])


def item_id(task_id: bytes, index: int) -> bytes:
    return object_id_for_return(task_id, index + 2)


class _Ownership(Protocol):
    def send_remove_borrower(self, object_id: bytes, owner: Any) -> None: ...


class GeneratorStreamsHost(Protocol):
    """What the generator streams need of the rest of the core worker."""

    owner_address: Any
    raylet: Connection
    ownership: _Ownership


class Stream:
    """One streaming task's items, from its owner's point of view."""

    __slots__ = ("spec", "call_site", "lock", "arrived", "received", "end", "read", "probes")

    def __init__(self, spec: TaskSpec, call_site: str) -> None:
        self.spec = spec
        self.call_site = call_site
        self.lock = threading.Lock()
        self.arrived: set[int] = set()  # items here and not handed out yet
        self.received = 0  # items 0 .. received-1 have all arrived (handed out or not)
        self.end: int | None = None  # the item count, once the task ended
        self.read = 0  # the next item ``take`` hands out
        self.probes: dict[int, bytes] = {}  # {item index: probe object id}


class GeneratorStreams:
    def __init__(
        self, host: GeneratorStreamsHost, *, memory_store: MemoryStore, refs: ReferenceCounter
    ) -> None:
        self.host = host
        self.memory_store = memory_store
        self.refs = refs
        self._streams: dict[bytes, Stream] = {}  # {task_id: Stream}, streaming tasks
        self._dynamic: dict[bytes, list[bytes]] = {}  # {task_id: item ids held}, dynamic ones

    # -- the caller's thread ---------------------------------------------------------------
    def open(self, spec: TaskSpec) -> Stream:
        """Before a streaming task is submitted: its items will have somewhere to go."""
        stream = self._streams[spec.task_id] = Stream(spec, user_call_site())
        return stream

    def peek(self, stream: Stream) -> tuple[bool, ObjectRef]:
        """Whether ``take`` would answer now, and a probe ref that is ready once it would."""
        with stream.lock:
            index = stream.read
            ready = index in stream.arrived or (stream.end is not None and index >= stream.end)
            probe = stream.probes.get(index)
            if probe is None:
                probe = stream.probes[index] = object_id_for_return(
                    stream.spec.task_id, _PROBE_FLAG | index
                )
                self.memory_store.add_pending(probe)
                if ready:
                    self.memory_store.put(probe, NONE_LOCATION)
        # Uncounted: a probe is the stream's, freed when its item is taken or dropped.
        return ready, ObjectRef(probe, self.host.owner_address, _count=False)

    def take(self, stream: Stream) -> ObjectRef | None:
        """The next item's ref (the stream's hold moves to it); None at the stream's end.
        Call once ``peek`` said it would answer."""
        with stream.lock:
            index = stream.read
            if index not in stream.arrived:
                return None
            stream.arrived.discard(index)
            stream.read = index + 1
            probe = stream.probes.pop(index, None)
        if probe is not None:
            self.memory_store.delete(probe)
        return counted_ref(item_id(stream.spec.task_id, index), self.host.owner_address)

    def finished(self, stream: Stream) -> bool:
        """Whether the task ended and every item was handed out."""
        with stream.lock:
            return stream.end is not None and stream.read >= stream.end

    # -- the I/O thread --------------------------------------------------------------------
    def h_generator_item(self, conn: Connection, body: dict) -> None:
        task_id, index, loc = body["task_id"], body["index"], body["loc"]
        inner = body.get("contained")
        if body.get("dynamic"):
            self._dynamic_item(task_id, index, loc, inner)
            return
        stream = self._streams.get(task_id)
        if stream is None or stream.end is not None:
            self._discard(item_id(task_id, index), loc, inner)  # the generator was dropped
            return
        with stream.lock:
            if index < stream.received or index in stream.arrived:
                return  # a retry sent it again: the first copy stays (and is the same object)
            self._own(item_id(task_id, index), loc, inner, stream.call_site)
            self._arrive(stream, index)

    def _own(self, oid: bytes, loc: tuple, inner: list | None, call_site: str) -> None:
        """The item is this process's object now, held once (by its stream or task)."""
        self.refs.add_owned_returns([oid], self.host.owner_address, call_site)
        if inner:
            self.refs.set_contains(oid, inner)
        if loc[0] == "plasma":
            self.refs.set_size(oid, loc[2])
        self.memory_store.put(oid, loc)

    def _arrive(self, stream: Stream, index: int) -> None:
        """Records item ``index`` (under the stream's lock) and wakes its probe."""
        stream.arrived.add(index)
        while stream.received in stream.arrived or stream.received < stream.read:
            stream.received += 1
        # A retry starts after what is here (the spec is the one pushed again).
        stream.spec.generator_skip = stream.received
        probe = stream.probes.get(index)
        if probe is not None:
            self.memory_store.put(probe, NONE_LOCATION)

    def _dynamic_item(self, task_id: bytes, index: int, loc: tuple, inner: list | None) -> None:
        oid = item_id(task_id, index)
        held = self._dynamic.setdefault(task_id, [])
        if oid in held:
            self.memory_store.put(oid, loc)  # a retry wrote it again: where it is now
            return
        held.append(oid)
        self._own(oid, loc, inner, "")

    def _discard(self, oid: bytes, loc: tuple, inner: list | None) -> None:
        """An item nobody will read: its copy and the borrows made for it go."""
        if loc[0] == "plasma" and not self.host.raylet.closed:
            self.host.raylet.send("plasma_delete", {"object_ids": [oid]})
        me = self.host.owner_address[0]
        for inner_id, inner_owner in inner or ():
            if inner_owner[0] != me:
                self.host.ownership.send_remove_borrower(inner_id, inner_owner)

    def error_item(self, spec: TaskSpec, error_loc: tuple) -> None:
        """The task raised: its error is the stream's last item, after those it yielded."""
        stream = self._streams.get(spec.task_id)
        if stream is None:
            return
        with stream.lock:
            index = max([stream.received, *(i + 1 for i in stream.arrived)])
            self._own(item_id(spec.task_id, index), error_loc, None, stream.call_site)
            self._arrive(stream, index)

    def task_ended(self, spec: TaskSpec) -> None:
        """After the task's final reply (or failure) is stored: no more items will come."""
        if spec.generator == GEN_DYNAMIC:
            # The task's return holds its items now (or, failed, nothing does).
            for oid in self._dynamic.pop(spec.task_id, ()):
                self.refs.remove_local(oid)
            return
        stream = self._streams.get(spec.task_id)
        if stream is None:
            return
        with stream.lock:
            stream.end = max([stream.received, *(i + 1 for i in stream.arrived)])
            probes = [p for i, p in stream.probes.items() if i >= stream.end]
        for probe in probes:
            self.memory_store.put(probe, NONE_LOCATION)

    def drop(self, task_id: bytes) -> None:
        """The ObjectRefGenerator is gone: free the items it never handed out."""
        stream = self._streams.pop(task_id, None)
        if stream is None:
            return
        with stream.lock:
            left = [item_id(task_id, i) for i in stream.arrived]
            stream.arrived.clear()
            probes = list(stream.probes.values())
            stream.probes.clear()
        for probe in probes:
            self.memory_store.delete(probe)
        for oid in left:
            self.refs.remove_local(oid)

    def stats(self) -> dict[str, int]:
        return {"streams": len(self._streams), "dynamic_tasks": len(self._dynamic)}
