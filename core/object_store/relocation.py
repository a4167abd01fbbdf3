"""The object table's side of making room: evicting, spilling, restoring and moving copies.

Part of ``ObjectStore`` (a mixin over its private state, kept apart so that each module stays
one concept): the table decides; the raylet's ``object_spiller`` does the I/O between a
``begin_*`` and its ``finish_*`` (or between a ``SpillNeeded`` / ``MoveNeeded`` and the retry),
on threads, with the copies concerned pinned meanwhile.

Making room for ``size`` bytes (``_make_room``), cheapest first:
1. a free block big enough;
2. the least recently used cached copy, if it alone is big enough;
3. the cheapest contiguous window of free blocks and cached copies (``room.plan``), evicted;
4. compaction (a memory copy: no client holds the offset of an object it has not pinned):
   a window of free blocks and unpinned copies whose copies are moved to free blocks
   elsewhere, or else unpinned copies slid down over the free space below them, so that
   scattered free space becomes one run. This is what keeps a fragmented store usable up
   to its size;
5. spilling the primaries of a window to disk (``SpillNeeded``).

Spilling: a primary copy nobody pins can be written to disk (``begin_spill`` /
``finish_spill``). From then on its memory is like a cached copy's, freed at once or whenever
room is needed, while the entry stays live with its ``spill_path``; ``get`` returns None
until ``begin_restore`` / ``finish_restore`` bring the bytes back. A restored copy keeps its
file, so spilling it again costs nothing.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Hashable

from ember.exceptions import ObjectStoreFullError
from ember.object_store import room
from ember.object_store.allocator import ArenaAllocator
from ember.object_store.entry import MOVER, RESTORER, SPILLER, Entry, MoveNeeded, SpillNeeded

# Compaction tries this many windows (cheapest first) before it gives up: each try costs a
# trial allocation of the window's copies elsewhere.
MOVE_WINDOWS_TRIED = 16


class Relocation:
    # The ObjectStore state this part works on.
    _alloc: ArenaAllocator
    _objects: dict[bytes, Entry]
    _deleted: dict[bytes, list[Entry]]
    _evictable: OrderedDict[Entry, None]
    _evictable_bytes: int
    _spillable: OrderedDict[Entry, None]
    _spillable_bytes: int
    _spill_totals: dict[str, int]
    spilling: bool
    compacting: bool

    def _account(self, entry: Entry, sign: int) -> None: ...
    def _evict(self, entry: Entry) -> None: ...
    def _pin(self, entry: Entry, client: Hashable) -> None: ...
    def _unpin(self, entry: Entry, client: Hashable) -> None: ...
    def _full_message(self, object_id: bytes, size: int, too_big: bool) -> str: ...
    def delete(self, object_id: bytes) -> bool: ...

    # -- making room -----------------------------------------------------------------------
    def _make_room(self, size: int) -> int | None:
        """Allocates ``size`` bytes, evicting cached copies if that makes room; raises
        MoveNeeded or SpillNeeded when copies must move first; None when nothing helps."""
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
        droppable = self._alloc.free_bytes + self._evictable_bytes
        spillable = self._spillable_bytes if self.spilling else 0
        if droppable + spillable < need:
            # Even perfectly coalesced memory would be too small: keep the cached copies
            # rather than throwing them away for nothing.
            return None
        chosen = room.plan(self._segments(moving=False), need)
        if chosen is not None and not any(s.kind == room.SPILLABLE for s in chosen):
            for seg in chosen:
                if seg.kind == room.EVICTABLE:
                    self._evict(seg.item)
            return self._alloc.allocate(size)
        if self.compacting and self._alloc.free_bytes >= need:
            self._plan_moves(need)  # raises MoveNeeded if it can
        if chosen is not None:
            raise SpillNeeded([s.item for s in chosen if s.kind == room.SPILLABLE])
        return None

    def _segments(self, moving: bool) -> list[room.Segment]:
        """The arena as blocks in address order, each with what freeing it would take:
        evicting, spilling (if on) or, with ``moving``, copying it elsewhere."""
        evict_rank = {e: i + 1 for i, e in enumerate(self._evictable)}
        spill_rank = {e: i + 1 for i, e in enumerate(self._spillable)} if self.spilling else {}
        segs = [room.Segment(off, size, room.FREE) for off, size in self._alloc.free_blocks()]
        for entry in self._in_memory_entries():
            if entry in evict_rank:
                kind, rank = room.EVICTABLE, evict_rank[entry]
            elif moving and entry.movable:
                kind, rank = room.MOVABLE, 0
            elif entry in spill_rank:
                kind, rank = room.SPILLABLE, spill_rank[entry]
            else:
                kind, rank = room.FIXED, 0
            segs.append(room.Segment(entry.offset, entry.block, kind, rank, entry))
        segs.sort(key=lambda s: s.offset)
        # Blocks no entry holds (reserved while copies move) stay where they are.
        tiled, pos = [], 0
        for seg in segs:
            if seg.offset > pos:
                tiled.append(room.Segment(pos, seg.offset - pos, room.FIXED))
            tiled.append(seg)
            pos = seg.offset + seg.size
        if pos < self._alloc.capacity:
            tiled.append(room.Segment(pos, self._alloc.capacity - pos, room.FIXED))
        return tiled

    def _in_memory_entries(self) -> list[Entry]:
        entries = [e for e in self._objects.values() if e.offset >= 0]
        for copies in self._deleted.values():
            entries.extend(e for e in copies if e.offset >= 0)
        return entries

    # -- compaction ------------------------------------------------------------------------
    def _plan_moves(self, need: int) -> None:
        """Chooses a window to empty by moving its copies elsewhere (the cheapest of the
        first few whose copies fit outside it); reserves the window's free blocks and the
        copies' new homes, pins the copies and raises MoveNeeded. Returns, having changed
        nothing, if there is none."""
        segments = self._segments(moving=True)
        for window in itertools.islice(room.windows(segments, need), MOVE_WINDOWS_TRIED):
            if any(s.kind == room.MOVABLE for s in window):
                self._try_moves(window)
        self._slide(segments, need)

    def _slide(self, segments: list[room.Segment], need: int) -> None:
        """Slides unpinned copies down over the free space below them, in address order,
        until one free run spans ``need`` (pinned copies stay: sliding restarts above each);
        raises MoveNeeded for those moves, or returns if no run can grow that big."""
        gap, pending = 0, []
        for seg in segments:
            if seg.kind == room.FIXED:
                gap, pending = 0, []
            elif seg.kind == room.MOVABLE:
                if gap:
                    pending.append(seg)
            else:  # free, or a cached copy to drop
                gap += seg.size
                if seg.kind == room.EVICTABLE:
                    pending.append(seg)
            if gap >= need:
                break
        else:
            return
        for seg in pending:
            if seg.kind == room.EVICTABLE:
                self._evict(seg.item)
        moves = []
        for seg in pending:
            if seg.kind == room.MOVABLE:
                entry = seg.item
                new = self._alloc.shift_down(entry.offset)
                moves.append((entry, entry.offset, new))
                # The allocator has it at its new place already; readers wait until the
                # bytes are there too.
                self._account(entry, -1)
                entry.offset, entry.busy = new, True
                self._account(entry, +1)
                self._pin(entry, MOVER)
        raise MoveNeeded(moves, [], slide=True)

    def _try_moves(self, window: list[room.Segment]) -> None:
        reserved = [s.offset for s in window if s.kind == room.FREE]
        for offset in reserved:
            self._alloc.take(offset)
        moves: list[tuple[Entry, int, int]] = []
        for seg in window:
            if seg.kind != room.MOVABLE:
                continue
            home = self._alloc.allocate(seg.item.size)
            if home is None:  # no room outside the window: undo, change nothing
                for _entry, _old, new in moves:
                    self._alloc.free(new)
                for offset in reserved:
                    self._alloc.free(offset)
                return
            moves.append((seg.item, seg.offset, home))
        for seg in window:
            if seg.kind == room.EVICTABLE:
                self._evict(seg.item)
        for entry, _old, _new in moves:
            self._set_busy(entry, True)
            self._pin(entry, MOVER)
        raise MoveNeeded(moves, reserved, slide=False)

    def finish_moves(self, need: MoveNeeded, ok: bool) -> None:
        """The copies were made (``ok``) or not: each entry now lives at its new offset (or
        stays at its old one), and the emptied range is free as one run."""
        for entry, old, new in need.moves:
            self._account(entry, -1)
            entry.busy = False
            if need.slide:
                pass  # already at its new offset; a failed slide left its bytes behind
            elif ok:
                self._alloc.free(old)
                entry.offset, entry.block = new, self._alloc.size_of(new) or 0
            else:
                self._alloc.free(new)
            self._account(entry, +1)
            self._unpin(entry, MOVER)  # frees it if it was deleted meanwhile
            if need.slide and not ok and self._objects.get(entry.object_id) is entry:
                # Half copied over itself: its bytes are gone (a get will say it is lost).
                self.delete(entry.object_id)
        for offset in need.reserved:
            self._alloc.free(offset)

    def _set_busy(self, entry: Entry, busy: bool) -> None:
        self._account(entry, -1)
        entry.busy = busy
        self._account(entry, +1)

    # -- spilling --------------------------------------------------------------------------
    def spill_candidates(self, max_bytes: int, max_count: int) -> list[Entry]:
        """Primary copies nobody pins, least recently used first, up to about ``max_bytes``
        (at least one) and ``max_count``."""
        out: list[Entry] = []
        total = 0
        for entry in self._spillable:
            if out and (total >= max_bytes or len(out) >= max_count):
                break
            out.append(entry)
            total += entry.size
        return out

    def begin_spill(self, entry: Entry) -> tuple[int, int] | None:
        """Pins a spillable copy while it is written out; its ``(offset, size)`` or None if
        it can no longer be spilled."""
        if not entry.spillable:
            return None
        self._pin(entry, SPILLER)
        return entry.offset, entry.size

    def finish_spill(self, entry: Entry, path: str | None) -> bool:
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

    def spilled_entry(self, object_id: bytes) -> Entry | None:
        """The live object if its only copy is on disk (a get must restore it first)."""
        entry = self._objects.get(object_id)
        if entry is None or entry.offset >= 0 or entry.spill_path is None:
            return None
        return entry

    def begin_restore(self, entry: Entry) -> int:
        """Memory for reading a spilled object back; returns its offset. Raises
        SpillNeeded, MoveNeeded or ObjectStoreFullError like ``create``."""
        offset = self._make_room(entry.size)
        if offset is None:
            raise ObjectStoreFullError(
                self._full_message(entry.object_id, entry.size, too_big=False)
            )
        self._account(entry, -1)
        entry.offset = offset
        entry.block = self._alloc.size_of(offset) or 0
        entry.busy = True
        self._account(entry, +1)
        self._pin(entry, RESTORER)
        return offset

    def finish_restore(self, entry: Entry, ok: bool) -> None:
        """The read ended: the copy is readable (its file kept), or on failure its memory
        goes back."""
        self._account(entry, -1)
        entry.busy = False
        if ok:
            self._spill_totals["num_restored_total"] += 1
            self._spill_totals["bytes_restored_total"] += entry.size
        self._account(entry, +1)
        self._unpin(entry, RESTORER)
        if not ok and not entry.deleted and entry.evictable:
            self._evict(entry)
