"""Offset bookkeeping for one node's shared-memory arena.

The raylet owns a single arena file; this module decides which byte ranges of it hold which
object. It performs no I/O so it can be tested exhaustively and reasoned about on its own.

Free blocks are kept three ways: a sorted list of ``(size, offset)`` for best-fit lookup by
bisection, and two dicts keyed by a block's start and end so that freeing can find and merge
its neighbours in constant time. Insertion into the sorted list is a memmove of pointers,
which stays cheap well past the 100,000 objects a store may hold.
"""

from __future__ import annotations

from bisect import bisect_left, insort


class ArenaAllocator:
    """Best-fit allocator over ``[0, capacity)`` with coalescing of freed neighbours.

    Every block starts at a multiple of ``alignment`` and spans a multiple of it, so a
    capacity that is not a multiple of ``alignment`` is rounded down.
    """

    def __init__(self, capacity: int, alignment: int = 4096) -> None:
        if alignment <= 0:
            raise ValueError(f"alignment must be positive, got {alignment}")
        if capacity < 0:
            raise ValueError(f"capacity must not be negative, got {capacity}")
        self._alignment = alignment
        self._capacity = capacity - capacity % alignment
        self._used = 0
        self._allocated: dict[int, int] = {}  # offset -> block size
        self._free_sorted: list[tuple[int, int]] = []  # (size, offset), ascending
        self._free_by_start: dict[int, int] = {}  # offset -> size
        self._free_by_end: dict[int, int] = {}  # offset + size -> offset
        if self._capacity:
            self._add_free(0, self._capacity)

    @property
    def capacity(self) -> int:
        """Usable bytes (the constructor's capacity rounded down to the alignment)."""
        return self._capacity

    @property
    def alignment(self) -> int:
        return self._alignment

    @property
    def used(self) -> int:
        """Bytes in allocated blocks, counting each block's rounding."""
        return self._used

    @property
    def free_bytes(self) -> int:
        return self._capacity - self._used

    @property
    def num_allocations(self) -> int:
        return len(self._allocated)

    def largest_free(self) -> int:
        """Size of the largest free block: the biggest request that can succeed now."""
        return self._free_sorted[-1][0] if self._free_sorted else 0

    def block_size(self, size: int) -> int:
        """The bytes a request for ``size`` bytes occupies (a zero-byte request takes a unit)."""
        if size < 0:
            raise ValueError(f"size must not be negative, got {size}")
        a = self._alignment
        return max(a, -(-size // a) * a)

    def size_of(self, offset: int) -> int | None:
        """The block size allocated at ``offset``, or None if nothing is allocated there."""
        return self._allocated.get(offset)

    def allocate(self, size: int) -> int | None:
        """Reserves a block of at least ``size`` bytes; returns its offset or None if none fits.

        Best fit keeps large free runs intact for large objects; among equal sizes the lowest
        offset wins so that recently freed low memory, whose pages are resident, is reused.
        """
        need = self.block_size(size)
        # (need, -1) sorts before every real entry of that size, so this finds the smallest
        # adequate block and, among those, the lowest offset.
        i = bisect_left(self._free_sorted, (need, -1))
        if i == len(self._free_sorted):
            return None
        block_size, offset = self._free_sorted[i]
        self._remove_free(offset, block_size, index=i)
        if block_size > need:
            self._add_free(offset + need, block_size - need)
        self._allocated[offset] = need
        self._used += need
        return offset

    def take(self, offset: int) -> int:
        """Allocates the whole free block that starts at ``offset``; returns its size. (The
        store reserves the free blocks of a range it is emptying, so that objects moved out
        of the range cannot land back in it.)"""
        size = self._free_by_start.get(offset)
        if size is None:
            raise ValueError(f"no free block starts at offset {offset}")
        self._remove_free(offset, size)
        self._allocated[offset] = size
        self._used += size
        return size

    def shift_down(self, offset: int) -> int:
        """Moves the allocated block at ``offset`` down to the start of the free block just
        below it (compaction slides objects together); returns its new offset. The space it
        leaves at its top joins the free block above, if any."""
        size = self._allocated.get(offset)
        if size is None:
            raise ValueError(f"offset {offset} is not the start of an allocated block")
        below = self._free_by_end.get(offset)
        if below is None:
            raise ValueError(f"no free block ends at offset {offset}")
        gap = offset - below
        self._remove_free(below, gap)
        del self._allocated[offset]
        self._allocated[below] = size
        self._add_free_merging(below + size, offset + size)
        return below

    def free(self, offset: int) -> int:
        """Releases the block at ``offset``, merging it with free neighbours; returns its size."""
        size = self._allocated.pop(offset, None)
        if size is None:
            raise ValueError(f"offset {offset} is not the start of an allocated block")
        self._used -= size
        start = offset
        before = self._free_by_end.get(start)
        if before is not None:
            self._remove_free(before, start - before)
            start = before
        self._add_free_merging(start, offset + size)
        return size

    def _add_free_merging(self, start: int, end: int) -> None:
        """Adds ``[start, end)`` as free, merged with the free block that follows it."""
        after_size = self._free_by_start.get(end)
        if after_size is not None:
            self._remove_free(end, after_size)
            end += after_size
        self._add_free(start, end - start)

    def free_blocks(self) -> list[tuple[int, int]]:
        """The free blocks as ``(offset, size)`` in address order (for tests and debugging)."""
        return sorted(self._free_by_start.items())

    def _add_free(self, offset: int, size: int) -> None:
        insort(self._free_sorted, (size, offset))
        self._free_by_start[offset] = size
        self._free_by_end[offset + size] = offset

    def _remove_free(self, offset: int, size: int, index: int | None = None) -> None:
        if index is None:
            index = bisect_left(self._free_sorted, (size, offset))
        del self._free_sorted[index]
        del self._free_by_start[offset]
        del self._free_by_end[offset + size]

    def __repr__(self) -> str:
        return (
            f"ArenaAllocator(capacity={self._capacity}, used={self._used}, "
            f"allocations={len(self._allocated)}, free_blocks={len(self._free_sorted)})"
        )
