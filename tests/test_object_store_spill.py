"""The store's side of spilling, without I/O: which copies may go to disk, what a spilled
object looks like to readers, restoring, deletion handing back files, and the choice of a
contiguous window of blocks to free (fragmentation)."""

from __future__ import annotations

import pytest
from ember.exceptions import ObjectStoreFullError
from ember.object_store import room
from ember.object_store.spill import SpillFiles, SpillSpaceError
from ember.object_store.store import MoveNeeded, ObjectStore, SpillNeeded

A = 4096


def oid(n: int) -> bytes:
    return n.to_bytes(4, "big") + b"\xdd" * 12


def put(store: ObjectStore, n: int, size: int = A, primary: bool = True) -> int:
    offset = store.create(oid(n), size, "w", primary=primary)
    store.seal(oid(n))
    return offset


def spill(store: ObjectStore, n: int, path: str | None = None) -> None:
    entry = store._objects[oid(n)]
    assert store.begin_spill(entry) is not None
    assert store.finish_spill(entry, path or f"/spill/{n}")


def spilling_store(capacity: int) -> tuple[ObjectStore, list[tuple[str, int]]]:
    freed: list[tuple[str, int]] = []
    store = ObjectStore(capacity, spilling=True, on_spill_freed=lambda p, s: freed.append((p, s)))
    return store, freed


def test_a_spilled_object_leaves_memory_but_stays_live() -> None:
    store, _ = spilling_store(4 * A)
    put(store, 1, 2 * A)
    spill(store, 1)
    assert store.contains(oid(1))
    assert store.get(oid(1), "r") is None  # must be restored first
    assert store.spilled_entry(oid(1)) is not None
    stats = store.stats()
    assert (stats["used_bytes"], stats["num_spilled"], stats["spilled_bytes"]) == (0, 1, 2 * A)
    assert (stats["num_spilled_total"], stats["bytes_spilled_total"]) == (1, 2 * A)
    row = store.list_objects()[0]
    assert (row["in_memory"], row["spilled"]) == (False, True)


def test_restore_makes_it_readable_and_droppable_without_a_new_write() -> None:
    store, freed = spilling_store(2 * A)
    put(store, 1, 2 * A)
    spill(store, 1)
    entry = store.spilled_entry(oid(1))
    offset = store.begin_restore(entry)
    assert store.get(oid(1), "r") is None  # still being read back
    store.finish_restore(entry, ok=True)
    assert store.get(oid(1), "r") == (offset, 2 * A)
    store.release(oid(1), "r")
    assert store.stats()["num_restored_total"] == 1
    # Its file is kept: a new object takes the memory at once, no spill needed.
    put(store, 2, 2 * A)
    assert store.spilled_entry(oid(1)) is not None and freed == []


def test_pinned_or_unsealed_or_cached_copies_are_never_spilled() -> None:
    store, _ = spilling_store(8 * A)
    put(store, 1)
    store.get(oid(1), "reader")
    store.create(oid(2), A, "w")  # being written
    put(store, 3, primary=False)  # a cached copy: evicted, not spilled
    put(store, 4)
    assert [e.object_id for e in store.spill_candidates(100 * A, 10)] == [oid(4)]
    assert store.stats()["spillable_bytes"] == A


def test_deleting_a_spilled_object_hands_back_its_file() -> None:
    store, freed = spilling_store(4 * A)
    put(store, 1, A)
    spill(store, 1, "/spill/one")
    assert store.delete(oid(1))
    assert freed == [("/spill/one", A)]
    stats = store.stats()
    assert (stats["num_spilled"], stats["spilled_bytes"], stats["used_bytes"]) == (0, 0, 0)
    assert store.list_objects() == []


def test_owner_death_deletes_spilled_copies_too() -> None:
    store, freed = spilling_store(4 * A)
    store.create(oid(1), A, "w", owner=(b"owner", "addr", b"node"))
    store.seal(oid(1))
    spill(store, 1, "/spill/owned")
    assert store.delete_owned_by([b"owner"]) == [oid(1)]
    assert freed == [("/spill/owned", A)]


def test_an_object_deleted_while_being_written_out_drops_the_file() -> None:
    store, _ = spilling_store(4 * A)
    put(store, 1)
    entry = store._objects[oid(1)]
    store.begin_spill(entry)
    store.delete(oid(1))
    assert store.stats()["used_bytes"] == A  # the writer still reads it
    assert store.finish_spill(entry, "/spill/late") is False  # the caller removes the file
    assert store.stats()["used_bytes"] == 0


def test_create_asks_for_the_adjacent_primaries_that_make_room() -> None:
    store, _ = spilling_store(4 * A)
    for n in range(4):
        put(store, n)
    store.get(oid(1), "r")  # pinned: blocks 0 and 2 are not adjacent to each other
    with pytest.raises(SpillNeeded) as need:
        store.create(oid(9), 2 * A, "w")
    # The only two adjacent movable blocks are 2 and 3.
    assert sorted(e.object_id for e in need.value.entries) == [oid(2), oid(3)]
    for n in (2, 3):
        spill(store, n)
    assert store.create(oid(9), 2 * A, "w") == 2 * A


def test_without_spilling_a_full_store_still_raises() -> None:
    store = ObjectStore(2 * A)
    put(store, 1)
    put(store, 2)
    with pytest.raises(ObjectStoreFullError):
        store.create(oid(3), A, "w")


def test_plan_picks_the_cheapest_contiguous_window() -> None:
    S = room.Segment
    segs = [
        S(0, A, room.SPILLABLE, 1),
        S(A, A, room.FIXED),
        S(2 * A, A, room.EVICTABLE, 5),
        S(3 * A, A, room.FREE),
        S(4 * A, A, room.SPILLABLE, 2),
        S(5 * A, A, room.EVICTABLE, 3),
    ]
    # 2 blocks: [evictable, free] costs A, less than any window with a primary.
    assert [s.offset for s in room.plan(segs, 2 * A)] == [2 * A, 3 * A]
    # 3 blocks: [evictable, free, spillable] and [free, spillable, evictable] both cost
    # 3A; the second's newest member (rank 3) was used longer ago than the first's (5).
    chosen = room.plan(segs, 3 * A)
    assert [s.offset for s in chosen] == [3 * A, 4 * A, 5 * A]
    assert room.plan(segs, 5 * A) is None  # the fixed block splits the arena


def test_plan_breaks_ties_by_least_recent_use() -> None:
    S = room.Segment
    segs = [S(i * A, A, room.EVICTABLE, rank) for i, rank in enumerate([3, 1, 2])]
    assert [s.offset for s in room.plan(segs, A)] == [A]


def test_spill_files_cap_and_round_trip(tmp_path) -> None:
    files = SpillFiles(str(tmp_path / "ember-spill-x"), max_bytes=10)
    path = files.reserve(b"\x01" * 4, 6)
    files.write(path, memoryview(b"abcdef"))
    out = bytearray(6)
    files.read_into(path, memoryview(out))
    assert bytes(out) == b"abcdef" and files.bytes_used == 6
    with pytest.raises(SpillSpaceError, match="its cap is 10 bytes"):
        files.reserve(b"\x02" * 4, 5)
    files.remove(path, 6)
    assert files.bytes_used == 0 and list((tmp_path / "ember-spill-x").glob("*.spill")) == []
    files.remove_all()
    assert not (tmp_path / "ember-spill-x").exists()


def compacting_store(capacity: int) -> ObjectStore:
    return ObjectStore(capacity, compacting=True)


def test_compaction_moves_copies_out_of_a_range_to_make_one_free_run() -> None:
    store = compacting_store(6 * A)
    for n in range(6):
        put(store, n)
    for n in (1, 3, 5):
        store.delete(oid(n))  # free blocks at A, 3A, 5A: 3A free, none adjacent
    store.get(oid(4), "r")  # pinned: stays where it is
    with pytest.raises(MoveNeeded) as need:
        store.create(oid(9), 2 * A, "w")
    moves = need.value.moves
    assert len(moves) == 1
    entry, old, new = moves[0]
    assert store.get(entry.object_id, "other") is None  # being moved: readers wait
    store.finish_moves(need.value, ok=True)
    assert store.get(entry.object_id, "other") == (new, A)
    assert old != new
    # The moved copy's old block and a free neighbour are one run now.
    offset = store.create(oid(9), 2 * A, "w")
    assert offset in (old - A, old)
    stats = store.stats()
    assert stats["used_bytes"] == 5 * A and stats["num_objects"] == 4


def _two_holes() -> tuple[ObjectStore, MoveNeeded]:
    """Objects at 0 and 2A, holes at A and 3A: 2A bytes need the one at 2A moved."""
    store = compacting_store(4 * A)
    for n in range(4):
        put(store, n)
    store.delete(oid(1))
    store.delete(oid(3))
    with pytest.raises(MoveNeeded) as need:
        store.create(oid(9), 2 * A, "w")
    assert not need.value.slide
    return store, need.value


def test_a_failed_move_leaves_everything_where_it_was() -> None:
    store, need = _two_holes()
    ((entry, old, _new),) = need.moves
    store.finish_moves(need, ok=False)
    assert store.get(entry.object_id, "r")[0] == old
    assert store.stats()["used_bytes"] == 2 * A
    assert sorted(store._alloc.free_blocks()) == [(A, A), (3 * A, A)]


def test_an_object_deleted_while_moving_is_freed_at_the_end() -> None:
    store, need = _two_holes()
    ((entry, _old, _new),) = need.moves
    store.delete(entry.object_id)
    store.finish_moves(need, ok=True)
    assert store.stats()["used_bytes"] == A
    assert store.create(oid(9), 2 * A, "w") is not None


def test_a_copy_too_big_for_any_hole_slides_down_instead() -> None:
    # [hole A][object 2A][hole A][pinned A]: no hole holds the 2A object, but sliding it
    # down over the first hole joins the two holes.
    store = compacting_store(5 * A)
    put(store, 0, A)
    put(store, 1, 2 * A)
    put(store, 2, A)
    put(store, 3, A)
    store.get(oid(3), "r")
    store.delete(oid(0))
    store.delete(oid(2))
    with pytest.raises(MoveNeeded) as need:
        store.create(oid(9), 2 * A, "w")
    assert need.value.slide
    ((entry, old, new),) = need.value.moves
    assert (entry.object_id, old, new) == (oid(1), A, 0)
    assert store.get(oid(1), "other") is None  # readers wait for the copy
    store.finish_moves(need.value, ok=True)
    assert store.get(oid(1), "other") == (0, 2 * A)
    assert store.create(oid(9), 2 * A, "w") == 2 * A


def test_allocator_shift_down_merges_the_space_left_above() -> None:
    from ember.object_store.allocator import ArenaAllocator

    alloc = ArenaAllocator(4 * A)
    a, b = alloc.allocate(A), alloc.allocate(A)
    alloc.free(a)
    assert alloc.shift_down(b) == 0
    assert alloc.free_blocks() == [(A, 3 * A)] and alloc.used == A
    with pytest.raises(ValueError, match="no free block ends"):
        alloc.shift_down(0)
