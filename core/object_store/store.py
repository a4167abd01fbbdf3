"""The raylet's table of objects in the node's shared-memory arena.

This is bookkeeping only: it decides where each object lives and when its memory may be
reused, while clients copy the bytes through ``ember.object_store.arena``. Memory is reused
only when nothing can still be reading it, which is what the reader pins are for: a client
pins an object on ``get`` and releases it when its last view of the bytes is gone.

Every operation is O(log n) or better in the number of objects: evictable objects sit in an
``OrderedDict`` in least-recently-used order, per-client indexes make disconnect clean-up
proportional to what that client held, and the statistics are kept as running counters.

Objects are also indexed by their owner's worker id, because an owner's death frees every
live copy it owned, primary or secondary (``delete_owned_by``): nobody can reach them any
more, and without the index a dead driver's objects would hold the store for good.

Making room for a new object (evicting, compacting, spilling) and restoring spilled objects
are in ``relocation`` (part of this class); the I/O is the raylet's ``object_spiller``'s.
Deleting a spilled object (its owner freed it or died) hands its file to ``on_spill_freed``.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from ember.exceptions import ObjectStoreFullError
from ember.object_store.allocator import ArenaAllocator
from ember.object_store.entry import Entry, MoveNeeded, SpillNeeded
from ember.object_store.relocation import Relocation

__all__ = ["ObjectStore", "ObjectNotFoundError", "SpillNeeded", "MoveNeeded", "owner_key"]

CREATED = "CREATED"
SEALED = "SEALED"


def owner_key(owner: Any) -> bytes | None:
    """The owner's worker id: the first field of a core worker's owner address."""
    if isinstance(owner, tuple | list):
        return owner[0] if owner else None
    return owner if isinstance(owner, bytes) else None


class ObjectNotFoundError(KeyError):
    """The object store holds no object with that id (in the state the operation needs)."""

    def __str__(self) -> str:
        # KeyError would show the repr of the message, quotes and all.
        return str(self.args[0]) if self.args else ""


class ObjectStore(Relocation):
    """Which object lives where in the arena, who is reading it, and when it can go."""

    def __init__(
        self,
        capacity: int,
        alignment: int = 4096,
        spilling: bool = False,
        on_spill_freed: Callable[[str, int], None] | None = None,
        compacting: bool = False,
    ) -> None:
        self._alloc = ArenaAllocator(capacity, alignment)
        # With spilling, create() may answer SpillNeeded; without, primaries stay in memory.
        self.spilling = spilling
        # With compacting, create() may answer MoveNeeded (copies moved within the arena).
        self.compacting = compacting
        # Called with (path, size) when a spilled object is deleted: its file can go.
        self.on_spill_freed = on_spill_freed
        # Live objects: created or sealed, not deleted by their owner.
        self._objects: dict[bytes, Entry] = {}
        # Objects the owner deleted whose memory is still in use (by readers or the creator).
        # A list because the id may be deleted, re-created and deleted again meanwhile.
        self._deleted: dict[bytes, list[Entry]] = {}
        self._client_pins: dict[Hashable, set[Entry]] = {}
        self._client_creations: dict[Hashable, set[Entry]] = {}
        # {owner worker id: its live (not deleted) objects}, for freeing on the owner's death.
        self._owned: dict[bytes, set[Entry]] = {}
        self._evictable: OrderedDict[Entry, None] = OrderedDict()
        self._evictable_bytes = 0
        self._num_sealed = 0
        self._num_primary = 0
        self._num_pinned = 0
        self._num_evicted_total = 0
        self._bytes_evicted_total = 0
        self._num_created_total = 0
        # Primary copies that could be spilled, least recently used first.
        self._spillable: OrderedDict[Entry, None] = OrderedDict()
        self._spillable_bytes = 0
        # Live objects with a copy on disk (whether or not also in memory).
        self._num_spilled = 0
        self._spilled_bytes = 0
        self._spill_totals = {
            "num_spilled_total": 0,
            "bytes_spilled_total": 0,
            "num_restored_total": 0,
            "bytes_restored_total": 0,
        }

    @property
    def capacity(self) -> int:
        return self._alloc.capacity

    @property
    def used_bytes(self) -> int:
        return self._alloc.used

    @property
    def has_pins(self) -> bool:
        """Whether any object is pinned (by a reader, or while it is spilled or moved)."""
        return self._num_pinned > 0

    @property
    def evictable_bytes(self) -> int:
        """Memory that can be dropped at once (cached copies, primaries also on disk)."""
        return self._evictable_bytes

    def create(
        self,
        object_id: bytes,
        size: int,
        creator: Hashable,
        owner: Any = None,
        primary: bool = True,
    ) -> int:
        """Reserves ``size`` bytes for a new object and returns their offset in the arena.

        Evicts unpinned cached copies when that makes room; raises MoveNeeded or SpillNeeded
        when copies must be moved or spilled first (then call again; see ``relocation``),
        ObjectStoreFullError when the object cannot fit and ValueError if the id is already
        live.
        """
        if size < 0:
            raise ValueError(f"object {object_id.hex()}: size must not be negative, got {size}")
        if object_id in self._objects:
            raise ValueError(f"object {object_id.hex()} already exists in the object store")
        if size > self._alloc.capacity:
            raise ObjectStoreFullError(self._full_message(object_id, size, too_big=True))
        offset = self._make_room(size)
        if offset is None:
            raise ObjectStoreFullError(self._full_message(object_id, size, too_big=False))
        now = time.time()
        entry = Entry(
            object_id=object_id,
            offset=offset,
            size=size,
            block=self._alloc.size_of(offset) or 0,
            creator=creator,
            owner=owner,
            primary=primary,
            created_at=now,
            last_access=now,
        )
        self._objects[object_id] = entry
        self._client_creations.setdefault(creator, set()).add(entry)
        owner_id = owner_key(owner)
        if owner_id is not None:
            self._owned.setdefault(owner_id, set()).add(entry)
        self._num_created_total += 1
        self._account(entry, +1)
        return offset

    def seal(self, object_id: bytes) -> None:
        """Marks a created object complete, so readers can get it."""
        entry = self._unsealed_entry(object_id, "is already sealed")
        self._account(entry, -1)
        entry.sealed = True
        creations = self._client_creations.get(entry.creator)
        if creations is not None:
            creations.discard(entry)
            if not creations:
                del self._client_creations[entry.creator]
        if entry.deleted:
            # The owner gave up on it while it was being written; nobody can have pinned it.
            self._free(entry)
        else:
            self._account(entry, +1)

    def abort(self, object_id: bytes) -> None:
        """Drops an object that was created but never sealed, freeing its memory."""
        entry = self._unsealed_entry(object_id, "is sealed and cannot be aborted")
        self._account(entry, -1)
        self._free(entry)

    def _unsealed_entry(self, object_id: bytes, if_sealed: str) -> Entry:
        """The object still being written under this id (maybe deleted meanwhile)."""
        entry = self._objects.get(object_id)
        if entry is None or entry.sealed:
            unsealed = self._find_deleted(object_id, lambda e: not e.sealed)
            if unsealed is None:
                if entry is not None:
                    raise ValueError(f"object {object_id.hex()} {if_sealed}")
                raise ObjectNotFoundError(f"object {object_id.hex()} is not in the object store")
            entry = unsealed
        return entry

    def get(self, object_id: bytes, client: Hashable) -> tuple[int, int] | None:
        """Pins a sealed object for ``client``; returns ``(offset, size)`` or None if absent."""
        entry = self._objects.get(object_id)
        if entry is None or not entry.sealed or entry.offset < 0 or entry.busy:
            return None
        entry.last_access = time.time()
        self._pin(entry, client)
        self._client_pins.setdefault(client, set()).add(entry)
        return entry.offset, entry.size

    def release(self, object_id: bytes, client: Hashable, offset: int | None = None) -> None:
        """Drops one of ``client``'s pins on the object, freeing it if it was deleted.

        ``offset`` picks the copy when the id was deleted and re-created while the client
        still held the old copy; without it the live copy's pin is released first.
        """
        entry = self._pinned_entry(object_id, client, offset)
        if entry is None:
            raise ValueError(f"client {client!r} holds no pin on object {object_id.hex()}")
        if entry.readers[client] == 1:
            self._drop_client_pin(client, entry)
        self._unpin(entry, client)

    def _after_unpin(self, entry: Entry) -> None:
        """After pins dropped (the entry was taken out of the accounting by the caller)."""
        if not entry.pins:
            # Being read counts as use, so LRU age runs from the last release.
            entry.last_access = time.time()
        if entry.deleted and not entry.pins:
            self._free(entry)
        else:
            self._account(entry, +1)

    def release_client(self, client: Hashable) -> None:
        """Forgets a disconnected client: drops its pins and aborts its unsealed objects."""
        for entry in self._client_pins.pop(client, set()):
            self._account(entry, -1)
            entry.pins -= entry.readers.pop(client)
            self._after_unpin(entry)
        for entry in self._client_creations.pop(client, set()):
            if not entry.sealed:
                self._account(entry, -1)
                self._free(entry)

    def delete(self, object_id: bytes) -> bool:
        """The owner freed the object: reclaim it now, or at its last release if pinned.

        Returns False if no live object has that id.
        """
        entry = self._objects.get(object_id)
        if entry is None:
            return False
        self._account(entry, -1)
        del self._objects[object_id]
        self._unindex_owner(entry)
        entry.deleted = True
        self._deleted.setdefault(object_id, []).append(entry)
        if entry.spill_path is not None:
            path, entry.spill_path = entry.spill_path, None
            if self.on_spill_freed is not None:
                self.on_spill_freed(path, entry.size)
        if entry.sealed and not entry.pins:
            self._free(entry)
        else:
            # Readers still map these bytes, or the creator is still writing them.
            self._account(entry, +1)
        return True

    def delete_owned_by(self, owner_ids: Iterable[bytes]) -> list[bytes]:
        """The owners died: deletes every live object they owned (freed now, or at the last
        release of a reader still mapping it). Returns the ids deleted."""
        deleted = []
        for owner_id in owner_ids:
            for entry in list(self._owned.get(owner_id, ())):
                if self._objects.get(entry.object_id) is entry:
                    self.delete(entry.object_id)
                    deleted.append(entry.object_id)
        return deleted

    def owners_on_node(self, node_id: bytes) -> list[bytes]:
        """The owners of live objects here whose process ran on ``node_id``."""
        found = []
        for owner_id, entries in self._owned.items():
            owner = next(iter(entries)).owner
            if isinstance(owner, tuple | list) and len(owner) > 2 and owner[2] == node_id:
                found.append(owner_id)
        return found

    def set_primary(self, object_id: bytes, primary: bool) -> None:
        """Marks a live object as the primary copy (never evicted) or a secondary one."""
        entry = self._objects.get(object_id)
        if entry is None:
            raise ObjectNotFoundError(f"object {object_id.hex()} is not in the object store")
        self._account(entry, -1)
        entry.primary = primary
        self._account(entry, +1)

    def _pin(self, entry: Entry, client: Hashable) -> None:
        self._account(entry, -1)
        entry.readers[client] = entry.readers.get(client, 0) + 1
        entry.pins += 1
        self._account(entry, +1)

    def _unpin(self, entry: Entry, client: Hashable) -> None:
        self._account(entry, -1)
        count = entry.readers[client] - 1
        if count:
            entry.readers[client] = count
        else:
            del entry.readers[client]
        entry.pins -= 1
        self._after_unpin(entry)

    def contains(self, object_id: bytes) -> bool:
        """True if the object is sealed and not deleted, i.e. a get would succeed."""
        entry = self._objects.get(object_id)
        return entry is not None and entry.sealed

    def size_of(self, object_id: bytes) -> int | None:
        """The requested size of a live (created or sealed) object, or None."""
        entry = self._objects.get(object_id)
        return None if entry is None else entry.size

    def stats(self) -> dict[str, int]:
        """Running totals for metrics; memory figures count whole allocation blocks."""
        return {
            "capacity_bytes": self._alloc.capacity,
            "used_bytes": self._alloc.used,
            "num_objects": self._alloc.num_allocations,
            "num_sealed": self._num_sealed,
            "num_primary": self._num_primary,
            "num_pinned_by_readers": self._num_pinned,
            "num_evicted_total": self._num_evicted_total,
            "bytes_evicted_total": self._bytes_evicted_total,
            "num_created_total": self._num_created_total,
            "num_spilled": self._num_spilled,
            "spilled_bytes": self._spilled_bytes,
            "spillable_bytes": self._spillable_bytes,
            **self._spill_totals,
        }

    def list_objects(self) -> list[dict[str, Any]]:
        """One row per object holding memory, deleted-but-pinned ones included."""
        entries = list(self._objects.values())
        for copies in self._deleted.values():
            entries.extend(copies)
        return [
            {
                "object_id": e.object_id.hex(),
                "offset": e.offset,
                "size": e.size,
                "state": SEALED if e.sealed else CREATED,
                "primary": e.primary,
                "readers": e.pins,
                "deleted": e.deleted,
                "in_memory": e.offset >= 0,
                "spilled": e.spill_path is not None,
                "owner": e.owner,
                "created_at": e.created_at,
                "last_access": e.last_access,
            }
            for e in entries
        ]

    def _account(self, entry: Entry, sign: int) -> None:
        # Every mutation of an entry is bracketed by _account(-1) and _account(+1) (or a
        # free), so the counters and the LRU set can never drift from the entries' state.
        if entry.sealed:
            self._num_sealed += sign
        if entry.primary and not entry.deleted:
            self._num_primary += sign
        if entry.pins:
            self._num_pinned += sign
        if entry.evictable:
            self._evictable_bytes += sign * entry.block
            _index(self._evictable, entry, sign)
        if entry.spillable:
            self._spillable_bytes += sign * entry.block
            _index(self._spillable, entry, sign)
        if entry.spill_path is not None and not entry.deleted:
            self._num_spilled += sign
            self._spilled_bytes += sign * entry.size

    def _free(self, entry: Entry) -> None:
        # The caller has already taken the entry out of the accounting.
        if entry.offset >= 0:
            self._alloc.free(entry.offset)
        if entry.deleted:
            copies = self._deleted[entry.object_id]
            copies.remove(entry)
            if not copies:
                del self._deleted[entry.object_id]
        elif self._objects.get(entry.object_id) is entry:
            del self._objects[entry.object_id]
            self._unindex_owner(entry)
        creations = self._client_creations.get(entry.creator)
        if creations is not None:
            creations.discard(entry)
            if not creations:
                del self._client_creations[entry.creator]

    def _evict(self, entry: Entry) -> None:
        self._account(entry, -1)
        if entry.primary:
            # Its copy on disk stays the object: only the memory goes (not an eviction).
            self._alloc.free(entry.offset)
            entry.offset, entry.block = -1, 0
            self._account(entry, +1)
            return
        self._free(entry)
        self._num_evicted_total += 1
        self._bytes_evicted_total += entry.block

    def _unindex_owner(self, entry: Entry) -> None:
        owner_id = owner_key(entry.owner)
        owned = self._owned.get(owner_id) if owner_id is not None else None
        if owned is not None:
            owned.discard(entry)
            if not owned:
                del self._owned[owner_id]

    def _drop_client_pin(self, client: Hashable, entry: Entry) -> None:
        pinned = self._client_pins.get(client)
        if pinned is not None:
            pinned.discard(entry)
            if not pinned:
                del self._client_pins[client]

    def _find_deleted(self, object_id: bytes, predicate: Callable[[Entry], bool]) -> Entry | None:
        for entry in self._deleted.get(object_id, ()):
            if predicate(entry):
                return entry
        return None

    def _pinned_entry(self, object_id: bytes, client: Hashable, offset: int | None) -> Entry | None:
        live = self._objects.get(object_id)
        if live is not None and client in live.readers and offset in (None, live.offset):
            return live
        return self._find_deleted(
            object_id, lambda e: client in e.readers and offset in (None, e.offset)
        )

    def _full_message(self, object_id: bytes, size: int, too_big: bool) -> str:
        capacity = self._alloc.capacity
        used = self._alloc.used
        held = used - self._evictable_bytes
        if too_big:
            reason = f"the object is larger than the store's capacity of {capacity} bytes"
        else:
            reason = (
                f"the store's capacity is {capacity} bytes, {used} bytes are in use and the "
                f"largest free block is {self._alloc.largest_free()} bytes"
            )
        return (
            f"Cannot create object {object_id.hex()} of {size} bytes in the object store: "
            f"{reason}. {held} bytes of the {used} bytes in use (capacity {capacity}) are held "
            f"by primary copies or pinned objects (being read or still being written), which "
            f"cannot be evicted. Release references to objects you no longer need (delete "
            f"ObjectRefs and drop values returned by get), or start Ember with a larger "
            f"object_store_memory."
        )


def _index(lru: OrderedDict[Entry, None], entry: Entry, sign: int) -> None:
    """Adds the entry as the most recently used (sign > 0), or takes it out."""
    if sign > 0:
        lru[entry] = None
    else:
        del lru[entry]
