"""``ObjectRef``: a future for a value somewhere in the cluster.

Each live ``ObjectRef`` instance counts as one local reference in its process's reference
counter; the owner (the process that created the object) frees the value once no process,
pending task or containing object holds a reference (see ``core_worker/reference_counter.py``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

from ember import global_state
from ember.id_types import JobID
from ember.ids import NO_JOB, OBJECT_ID_SIZE, job_id_of, task_id_of
from ember.serialization import record_contained_ref

# (worker_id, address, node_id): where the owner's core worker listens.
OwnerAddress = tuple[bytes, str, bytes]


class ObjectRef:
    __slots__ = ("_id", "_owner", "_counted", "_afut", "_callbacks", "__weakref__")

    def __init__(self, object_id: bytes, owner: OwnerAddress | None = None, *, _count=True):
        if not isinstance(object_id, bytes):
            raise TypeError(f"ObjectRef takes the id as bytes, not {type(object_id).__name__}")
        self._id = object_id
        self._owner = owner
        self._counted = False
        self._afut: asyncio.Future | None = None
        self._callbacks: dict | None = None
        if _count:
            worker = global_state.worker
            if worker is not None:
                worker.refs.add_local(object_id, owner)
                self._counted = True

    def __del__(self) -> None:
        # No locks here: __del__ can run from the garbage collector while this very thread
        # holds a runtime lock. The count drops later (CoreWorker.drain_dropped_refs).
        if self._counted:
            worker = global_state.worker
            if worker is not None:
                try:
                    worker.dropped_refs.append(self._id)
                    if worker.drain_asleep:  # an idle worker drains only when woken
                        worker.wake_drain()
                except Exception:  # interpreter shutdown: nothing left to free
                    pass

    @classmethod
    def nil(cls) -> ObjectRef:
        """The id of no object (what a generator's ``_next_sync`` gives when it timed out)."""
        return cls(bytes(OBJECT_ID_SIZE), None, _count=False)

    def is_nil(self) -> bool:
        return not any(self._id)

    def binary(self) -> bytes:
        return self._id

    def hex(self) -> str:
        return self._id.hex()

    def task_id(self) -> bytes:
        return task_id_of(self._id)

    def job_id(self) -> JobID:
        """The job whose task made the object (its id holds the job's, ``ember.ids``).
        An object made outside any task (a driver's ``put``) is its owner's job's."""
        job = job_id_of(self._id)
        if job == NO_JOB:
            worker = global_state.worker
            if worker is not None and self._owner is not None and worker.job_id:
                if self._owner[0] == worker.worker_id:
                    job = worker.job_id
        return JobID(job)

    def owner_address(self) -> OwnerAddress | None:
        return self._owner

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObjectRef) and other._id == self._id

    def __hash__(self) -> int:
        return hash(self._id)

    def __repr__(self) -> str:
        return f"ObjectRef({self._id.hex()})"

    def __reduce__(self):
        # Serialising a ref inside a value: the serialiser records it (for reference counting
        # and `ember memory`'s CAPTURED_IN_OBJECT) and the receiver rebuilds it as a borrower.
        record_contained_ref(self._id, self._owner)
        return (_rebuild_object_ref, (self._id, self._owner))

    # -- futures ---------------------------------------------------------------------------
    def future(self) -> concurrent.futures.Future:
        """A ``concurrent.futures.Future`` that resolves to the value (or its error)."""
        worker = global_state.require_worker()
        return worker.object_future(self)

    def __await__(self):
        return asyncio.wrap_future(self.future()).__await__()

    def as_future(self) -> asyncio.Future:
        return asyncio.wrap_future(self.future())

    # -- the asyncio.Future protocol, so ``await asyncio.wait([ref])`` works as in Ray ------
    def _async_future(self) -> asyncio.Future:
        if self._afut is None:
            self._afut = asyncio.wrap_future(self.future())
        return self._afut

    def add_done_callback(self, fn, *, context=None) -> None:
        def call(_fut: asyncio.Future) -> None:
            fn(self)

        if self._callbacks is None:
            self._callbacks = {}
        self._callbacks[fn] = call
        self._async_future().add_done_callback(call, context=context)

    def remove_done_callback(self, fn) -> int:
        call = (self._callbacks or {}).pop(fn, None)
        if call is None or self._afut is None:
            return 0
        return self._afut.remove_done_callback(call)

    def done(self) -> bool:
        return self._async_future().done()

    def cancelled(self) -> bool:
        return False

    def result(self):
        return self._async_future().result()

    def exception(self):
        return self._async_future().exception()

    def get_loop(self):
        return self._async_future().get_loop()


def counted_ref(object_id: bytes, owner: OwnerAddress | None) -> ObjectRef:
    """An ObjectRef whose local count the caller already added (saves a lock round)."""
    ref = ObjectRef(object_id, owner, _count=False)
    ref._counted = True
    return ref


def _rebuild_object_ref(object_id: bytes, owner: OwnerAddress | None) -> ObjectRef:
    worker = global_state.worker
    if worker is not None:
        worker.refs.on_deserialized(object_id, owner)
    return ObjectRef(object_id, owner)


# Ray 0.8's name for it.
ObjectID = ObjectRef


def is_object_ref(value: Any) -> bool:
    return type(value) is ObjectRef
