"""Distributed reference counting by the owner (the process that created the object).

Rules:
- An owned object lives while any of these is non-zero: local refs (``ObjectRef`` instances
  here), pending tasks that take it as an argument, owned objects that contain it, and
  borrowers (other processes holding it). At zero it is freed (``on_free``).
- A process that deserializes a ref it does not own registers as a borrower with the owner
  and waits for the ack before using it, so an owner never frees under a borrower's feet.
  Whoever sent the ref kept it alive until then: a pending task holds its arguments; a task
  that returns refs registers its caller as a borrower before it replies.
- A borrower whose own counts reach zero tells the owner (``on_borrow_released``).
- The five reference kinds of Ray 0.8's ``ray memory`` are read off these counts for
  ``ember memory``: LOCAL_REFERENCE, USED_BY_PENDING_TASK, CAPTURED_IN_OBJECT,
  PINNED_IN_MEMORY (a deserialized zero-copy value still alive) and ACTOR_HANDLE.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

OwnerAddress = Any  # (worker_id, address, node_id)


class Ref:
    __slots__ = (
        "owned",
        "owner",
        "local",
        "submitted",
        "captured",
        "borrowers",
        "contains",
        "pinned_views",
        "is_actor_handle",
        "call_site",
        "created_at",
        "size",
    )

    def __init__(self, owned: bool, owner: OwnerAddress | None) -> None:
        self.owned = owned
        self.owner = owner
        self.local = 0
        self.submitted = 0
        self.captured = 0
        self.borrowers: dict[bytes, int] | None = None  # {borrower worker_id: registrations}
        self.contains: list[tuple[bytes, OwnerAddress]] | None = None
        self.pinned_views = 0
        self.is_actor_handle = False
        self.call_site = ""
        self.created_at = time.time()
        self.size = -1

    def in_use(self) -> bool:
        return bool(self.local or self.submitted or self.captured or self.borrowers)


class _NewBorrows(threading.local):
    """Per thread: refs deserialized and not registered yet. A class default, because
    ``getattr(local, name, None)`` raises and catches inside on every thread that never set
    it, and every ``get`` asks."""

    new_borrows: list[tuple[bytes, OwnerAddress]] | None = None


class ReferenceCounter:
    def __init__(
        self,
        my_worker_id: bytes,
        on_free: Callable[[bytes, Ref], None],
        on_borrow_released: Callable[[bytes, OwnerAddress], None],
    ) -> None:
        self.my_worker_id = my_worker_id
        self._refs: dict[bytes, Ref] = {}  # {object_id: Ref}
        self._lock = threading.RLock()
        self._on_free = on_free
        self._on_borrow_released = on_borrow_released
        # Borrowed refs deserialized on this thread, to register with their owners.
        self._tls = _NewBorrows()

    # -- owned objects ---------------------------------------------------------------------
    def add_owned(
        self,
        object_id: bytes,
        owner: OwnerAddress,
        contains: list | None = None,
        call_site: str = "",
        size: int = -1,
    ) -> None:
        """A new object this process owns (a put, or the return of a task it submitted)."""
        with self._lock:
            ref = self._refs.get(object_id)
            if ref is None:
                ref = self._refs[object_id] = Ref(True, owner)
            ref.owned = True
            ref.owner = owner
            ref.call_site = call_site
            ref.size = size
            if contains:
                self._set_contains(ref, contains)

    def add_owned_returns(
        self, object_ids: list[bytes], owner: OwnerAddress, call_site: str = ""
    ) -> None:
        """A submitted task's returns: owned, each with one local ref (the caller's ObjectRef)."""
        with self._lock:
            refs = self._refs
            for object_id in object_ids:
                ref = refs.get(object_id)
                if ref is None:
                    ref = refs[object_id] = Ref(True, owner)
                    ref.call_site = call_site
                ref.local += 1

    def set_contains(self, object_id: bytes, contains: list) -> None:
        with self._lock:
            ref = self._refs.get(object_id)
            if ref is not None and contains:
                self._set_contains(ref, contains)

    def _set_contains(self, ref: Ref, contains: list) -> None:
        ref.contains = list(contains)
        for inner_id, inner_owner in contains:
            inner = self._refs.get(inner_id)
            if inner is None:
                inner = self._refs[inner_id] = Ref(inner_owner[0] == self.my_worker_id, inner_owner)
            inner.captured += 1

    def set_size(self, object_id: bytes, size: int) -> None:
        ref = self._refs.get(object_id)
        if ref is not None:
            ref.size = size

    def mark_actor_handle(self, object_id: bytes) -> None:
        with self._lock:
            ref = self._refs.get(object_id)
            if ref is not None:
                ref.is_actor_handle = True

    # -- local references ------------------------------------------------------------------
    def add_local(self, object_id: bytes, owner: OwnerAddress | None) -> None:
        with self._lock:
            ref = self._refs.get(object_id)
            if ref is None:
                # A ref with no owner address (``ObjectRef(some_bytes)``) is nobody's: this
                # process owns only what it registered with add_owned, or names itself as
                # owner of. Taking it as ours made get() wait for it forever.
                owned = owner is not None and owner[0] == self.my_worker_id
                ref = self._refs[object_id] = Ref(owned, owner)
            ref.local += 1

    def remove_local(self, object_id: bytes) -> None:
        with self._lock:
            ref = self._refs.get(object_id)
            if ref is None:
                return
            ref.local -= 1
            if not ref.in_use():
                self._release(object_id, ref)

    def on_deserialized(self, object_id: bytes, owner: OwnerAddress | None) -> None:
        """Called while unpickling a ref; borrowed ones are registered by ``take_new_borrows``."""
        if owner is None or owner[0] == self.my_worker_id:
            return
        with self._lock:
            ref = self._refs.get(object_id)
            if ref is not None and ref.in_use():
                return  # already a registered borrower
        pending = self._tls.new_borrows
        if pending is None:
            pending = self._tls.new_borrows = []
        pending.append((object_id, owner))

    def take_new_borrows(self) -> list[tuple[bytes, OwnerAddress]]:
        pending = self._tls.new_borrows
        if not pending:
            return []
        self._tls.new_borrows = None
        return pending

    # -- pending tasks ---------------------------------------------------------------------
    def add_submitted(self, refs: list[tuple[bytes, OwnerAddress]]) -> None:
        with self._lock:
            for object_id, owner in refs:
                ref = self._refs.get(object_id)
                if ref is None:
                    owned = owner is not None and owner[0] == self.my_worker_id
                    ref = self._refs[object_id] = Ref(owned, owner)
                ref.submitted += 1

    def remove_submitted(self, refs: list[tuple[bytes, OwnerAddress]]) -> None:
        with self._lock:
            for object_id, _ in refs:
                ref = self._refs.get(object_id)
                if ref is None:
                    continue
                ref.submitted -= 1
                if not ref.in_use():
                    self._release(object_id, ref)

    # -- borrowers (owner side) ------------------------------------------------------------
    def add_borrower(self, object_id: bytes, borrower: bytes) -> bool:
        """Returns False when the object is already freed (the borrower gets an error)."""
        with self._lock:
            ref = self._refs.get(object_id)
            if ref is None:
                return False
            if ref.borrowers is None:
                ref.borrowers = {}
            ref.borrowers[borrower] = ref.borrowers.get(borrower, 0) + 1
            return True

    def remove_borrower(self, object_id: bytes, borrower: bytes, count: int = 1) -> None:
        with self._lock:
            ref = self._refs.get(object_id)
            if ref is None or not ref.borrowers or borrower not in ref.borrowers:
                return
            left = ref.borrowers[borrower] - count
            if left > 0:
                ref.borrowers[borrower] = left
            else:
                del ref.borrowers[borrower]
            if not ref.in_use():
                self._release(object_id, ref)

    def remove_borrower_everywhere(self, borrower: bytes) -> None:
        """A borrower process died: it holds nothing any more."""
        with self._lock:
            for object_id, ref in list(self._refs.items()):
                if ref.borrowers and borrower in ref.borrowers:
                    del ref.borrowers[borrower]
                    if not ref.in_use():
                        self._release(object_id, ref)

    # -- freeing ---------------------------------------------------------------------------
    def _release(self, object_id: bytes, ref: Ref) -> None:
        # A loop, not recursion: releasing ``r = put([r])`` nested 10,000 deep hit Python's
        # recursion limit here, surfacing in whatever call dropped the outer ref.
        work = [(object_id, ref)]
        while work:
            object_id, ref = work.pop()
            del self._refs[object_id]
            if ref.owned:
                self._on_free(object_id, ref)
            elif ref.owner is not None:
                self._on_borrow_released(object_id, ref.owner)
            for inner_id, _ in ref.contains or ():
                inner = self._refs.get(inner_id)
                if inner is not None:
                    inner.captured -= 1
                    if not inner.in_use():
                        work.append((inner_id, inner))

    # -- views -----------------------------------------------------------------------------
    def has(self, object_id: bytes) -> bool:
        return object_id in self._refs

    def get(self, object_id: bytes) -> Ref | None:
        return self._refs.get(object_id)

    def __len__(self) -> int:
        return len(self._refs)

    def snapshot(self) -> list[tuple[bytes, Ref]]:
        with self._lock:
            return list(self._refs.items())

    def reference_types(self, ref: Ref) -> list[str]:
        """The ``ray memory`` reference kinds this entry stands for."""
        kinds = []
        if ref.is_actor_handle:
            kinds.append("ACTOR_HANDLE")
        elif ref.local:
            kinds.append("PINNED_IN_MEMORY" if ref.pinned_views else "LOCAL_REFERENCE")
        if ref.submitted:
            kinds.append("USED_BY_PENDING_TASK")
        if ref.captured:
            kinds.append("CAPTURED_IN_OBJECT")
        if not kinds and ref.borrowers:
            kinds.append("BORROWED")
        return kinds
