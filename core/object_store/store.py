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

Spilling (the I/O is ``ember.raylet.object_spiller``'s): a primary copy nobody pins can be
written to disk (``begin_spill`` / ``finish_spill``). From then on its memory is like a cached
copy's, freed at once or whenever room is needed, while the entry stays live with its
``spill_path``; ``get`` of it returns None until ``begin_restore`` / ``finish_restore`` bring
the bytes back. A restored copy keeps its file, so spilling it again costs nothing. Deleting
the object (owner freed it or died) hands its file to ``on_spill_freed``.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ember.exceptions import ObjectStoreFullError
from ember.object_store import room
from ember.object_store.allocator import ArenaAllocator

CREATED = "CREATED"
SEALED = "SEALED"


def owner_key(owner: Any) -> bytes | None:
    """The owner's worker id: the first field of a core worker's owner address."""
    if isinstance(owner, tuple | list):
        return owner[0] if owner else None
    return owner if isinstance(owner, bytes) else None


class SpillNeeded(Exception):
    """``create`` can make room only by spilling these primary copies first (then retry)."""

    def __init__(self, entries: list[_Entry]) -> None:
        super().__init__(f"{len(entries)} objects must be spilled to make room")
        self.entries = entries


# Internal readers: a copy being written to disk or read back must stay where it is.
SPILLER = ("spill",)
RESTORER = ("restore",)


class ObjectNotFoundError(KeyError):
    """The object store holds no object with that id (in the state the operation needs)."""

    def __str__(self) -> str:
        # KeyError would show the repr of the message, quotes and all.
        return str(self.args[0]) if self.args else ""


@dataclass(slots=True, eq=False)
class _Entry:
    # eq=False keeps identity hashing: entries are keys of the LRU and per-client indexes,
    # and two copies of one id can coexist (a deleted-but-pinned one and its re-creation).
    object_id: bytes
    offset: int  # -1: not in memory (spilled)
    size: int
    block: int
    creator: Hashable
    # (worker_id, address, node_id) from core workers; plain bytes in tests; None: unknown.
    owner: Any
    primary: bool
    created_at: float
    last_access: float
    sealed: bool = False
    deleted: bool = False
    pins: int = 0
    readers: dict[Hashable, int] = field(default_factory=dict)
    spill_path: str | None = None  # its copy on disk, once written
    restoring: bool = False  # in memory, being read back from disk: not readable yet

    @property
    def in_memory(self) -> bool:
        return self.offset >= 0

    @property
    def evictable(self) -> bool:
        # A primary copy that is also on disk can leave memory like a cached copy.
        return (
            self.sealed
            and not self.pins
            and not self.deleted
            and self.offset >= 0
            and (not self.primary or self.spill_path is not None)
        )

    @property
    def spillable(self) -> bool:
        return (
            self.sealed
            and self.primary
            and not self.pins
            and not self.deleted
            and self.offset >= 0
            and self.spill_path is None
        )


class ObjectStore:
    """Which object lives where in the arena, who is reading it, and when it can go."""

    def __init__(
        self,
        capacity: int,
        alignment: int = 4096,
        spilling: bool = False,
        on_spill_freed: Callable[[str, int], None] | None = None,
    ) -> None:
        self._alloc = ArenaAllocator(capacity, alignment)
        # With spilling, create() may answer SpillNeeded; without, primaries never move.
        self.spilling = spilling
        # Called with (path, size) when a spilled object is deleted: its file can go.
        self.on_spill_freed = on_spill_freed
        # Live objects: created or sealed, not deleted by their owner.
        self._objects: dict[bytes, _Entry] = {}
        # Objects the owner deleted whose memory is still in use (by readers or the creator).
        # A list because the id may be deleted, re-created and deleted again meanwhile.
        self._deleted: dict[bytes, list[_Entry]] = {}
        self._client_pins: dict[Hashable, set[_Entry]] = {}
        self._client_creations: dict[Hashable, set[_Entry]] = {}
        # {owner worker id: its live (not deleted) objects}, for freeing on the owner's death.
        self._owned: dict[bytes, set[_Entry]] = {}
        self._evictable: OrderedDict[_Entry, None] = OrderedDict()
        self._evictable_bytes = 0
        self._num_sealed = 0
        self._num_primary = 0
        self._num_pinned = 0
        self._num_evicted_total = 0
        self._bytes_evicted_total = 0
        self._num_created_total = 0
        # Primary copies that could be spilled, least recently used first.
        self._spillable: OrderedDict[_Entry, None] = OrderedDict()
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

        Evicts unpinned secondary copies, least recently used first, when that makes room.
        Raises ObjectStoreFullError when the object cannot fit and ValueError if the id is
        already live.
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
        entry = _Entry(
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

    def _make_room(self, size: int) -> int | None:
        """Allocates ``size`` bytes, evicting cached copies if that makes room; raises
        SpillNeeded when primaries must be spilled first; None when nothing can help."""
        offset = self._alloc.allocate(size)
        if offset is not None:
            return offset
        need = self._alloc.block_size(size)
        # The common case, cheaply: the least recently used cached copy alone is big enough.
        while self._evictable:
            lru = next(iter(self._evictable))
            if lru.block < need:
                break
            self._evict(lru)
            offset = self._alloc.allocate(size)
            if offset is not None:
                return offset
        movable = self._evictable_bytes + (self._spillable_bytes if self.spilling else 0)
        if self._alloc.free_bytes + movable < need:
            # Even perfectly coalesced memory would be too small: keep the cached copies
            # rather than throwing them away for nothing.
            return None
        chosen = room.plan(self._segments(), need)
        if chosen is None:
            return None
        to_spill = [s.item for s in chosen if s.kind == room.SPILLABLE]
        if to_spill:
            raise SpillNeeded(to_spill)
        for seg in chosen:
            self._evict(seg.item)
        return self._alloc.allocate(size)

    def _segments(self) -> list[room.Segment]:
        """The arena as blocks in address order, each with what freeing it would take."""
        evict_rank = {e: i + 1 for i, e in enumerate(self._evictable)}
        spill_rank = {e: i + 1 for i, e in enumerate(self._spillable)} if self.spilling else {}
        segs = [room.Segment(off, size, room.FREE) for off, size in self._alloc.free_blocks()]
        for entry in self._in_memory_entries():
            if entry in evict_rank:
                kind, rank = room.EVICTABLE, evict_rank[entry]
            elif entry in spill_rank:
                kind, rank = room.SPILLABLE, spill_rank[entry]
            else:
                kind, rank = room.FIXED, 0
            segs.append(room.Segment(entry.offset, entry.block, kind, rank, entry))
        segs.sort(key=lambda s: s.offset)
        return segs

    def _in_memory_entries(self) -> list[_Entry]:
        entries = [e for e in self._objects.values() if e.offset >= 0]
        for copies in self._deleted.values():
            entries.extend(e for e in copies if e.offset >= 0)
        return entries

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

    def _unsealed_entry(self, object_id: bytes, if_sealed: str) -> _Entry:
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
        if entry is None or not entry.sealed or entry.offset < 0 or entry.restoring:
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

    def _after_unpin(self, entry: _Entry) -> None:
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

    # -- spilling (the spiller does the I/O between these calls) -----------------------
    def spill_candidates(self, max_bytes: int, max_count: int) -> list[_Entry]:
        """Primary copies nobody pins, least recently used first, up to about ``max_bytes``
        (at least one) and ``max_count``."""
        out: list[_Entry] = []
        total = 0
        for entry in self._spillable:
            if out and (total >= max_bytes or len(out) >= max_count):
                break
            out.append(entry)
            total += entry.size
        return out

    def begin_spill(self, entry: _Entry) -> tuple[int, int] | None:
        """Pins a spillable copy while it is written out; its ``(offset, size)`` or None if
        it can no longer be spilled."""
        if not entry.spillable:
            return None
        self._pin(entry, SPILLER)
        return entry.offset, entry.size

    def finish_spill(self, entry: _Entry, path: str | None) -> bool:
        """The write ended (``path`` None: it failed). Frees the memory copy if nobody reads
        it. Returns False if the file is not wanted (the object was deleted meanwhile), in
        which case the caller removes it."""
        self._unpin(entry, SPILLER)
        if path is None:
            return True
        if entry.deleted or self._objects.get(entry.object_id) is not entry:
            return False
        self._account(entry, -1)
        entry.spill_path = path
        self._spill_totals["num_spilled_total"] += 1
        self._spill_totals["bytes_spilled_total"] += entry.size
        self._account(entry, +1)
        if entry.evictable:
            self._evict(entry)
        return True

    def spilled_entry(self, object_id: bytes) -> _Entry | None:
        """The live object if its only copy is on disk (a get must restore it first)."""
        entry = self._objects.get(object_id)
        if entry is None or entry.offset >= 0 or entry.spill_path is None:
            return None
        return entry

    def begin_restore(self, entry: _Entry) -> int:
        """Memory for reading a spilled object back; returns its offset. Raises
        SpillNeeded or ObjectStoreFullError like ``create``."""
        offset = self._make_room(entry.size)
        if offset is None:
            raise ObjectStoreFullError(
                self._full_message(entry.object_id, entry.size, too_big=False)
            )
        self._account(entry, -1)
        entry.offset = offset
        entry.block = self._alloc.size_of(offset) or 0
        entry.restoring = True
        self._account(entry, +1)
        self._pin(entry, RESTORER)
        return offset

    def finish_restore(self, entry: _Entry, ok: bool) -> None:
        """The read ended: the copy is readable (its file kept), or on failure its memory
        goes back."""
        self._account(entry, -1)
        entry.restoring = False
        if ok:
            self._spill_totals["num_restored_total"] += 1
            self._spill_totals["bytes_restored_total"] += entry.size
        self._account(entry, +1)
        self._unpin(entry, RESTORER)
        if not ok and not entry.deleted and entry.evictable:
            self._evict(entry)

    def _pin(self, entry: _Entry, client: Hashable) -> None:
        self._account(entry, -1)
        entry.readers[client] = entry.readers.get(client, 0) + 1
        entry.pins += 1
        self._account(entry, +1)

    def _unpin(self, entry: _Entry, client: Hashable) -> None:
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

    def _account(self, entry: _Entry, sign: int) -> None:
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

    def _free(self, entry: _Entry) -> None:
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

    def _evict(self, entry: _Entry) -> None:
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

    def _unindex_owner(self, entry: _Entry) -> None:
        owner_id = owner_key(entry.owner)
        owned = self._owned.get(owner_id) if owner_id is not None else None
        if owned is not None:
            owned.discard(entry)
            if not owned:
                del self._owned[owner_id]

    def _drop_client_pin(self, client: Hashable, entry: _Entry) -> None:
        pinned = self._client_pins.get(client)
        if pinned is not None:
            pinned.discard(entry)
            if not pinned:
                del self._client_pins[client]

    def _find_deleted(self, object_id: bytes, predicate: Callable[[_Entry], bool]) -> _Entry | None:
        for entry in self._deleted.get(object_id, ()):
            if predicate(entry):
                return entry
        return None

    def _pinned_entry(
        self, object_id: bytes, client: Hashable, offset: int | None
    ) -> _Entry | None:
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


def _index(lru: OrderedDict[_Entry, None], entry: _Entry, sign: int) -> None:
    """Adds the entry as the most recently used (sign > 0), or takes it out."""
    if sign > 0:
        lru[entry] = None
    else:
        del lru[entry]
