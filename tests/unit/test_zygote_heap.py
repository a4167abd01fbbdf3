"""The zygote's heap before it forks (``raylet/zygote_heap.py``): the allocator's own table
of free blocks is read for every size class, and filling takes the free blocks of every pool
that was partly used, so a child's first objects land in pools of its own; glibc malloc's
small free chunks are taken the same way."""

from __future__ import annotations

import sys

import pytest
from ember.raylet import zygote_heap

POOL = 16 * 1024  # pymalloc's pool on 64-bit CPython 3.11


@pytest.mark.skipif(not hasattr(sys, "_debugmallocstats"), reason="no pymalloc statistics")
def test_filling_takes_the_free_blocks_of_partly_used_pools() -> None:
    before = zygote_heap.free_blocks()
    assert sorted(before) == list(range(16, 513, 16)), "every size class, 16 to 512 bytes"
    keep = zygote_heap.fill_free_blocks()
    after = zygote_heap.free_blocks()
    # The fill reads the table again itself: a few blocks may have changed hands between.
    assert abs(len(keep) - sum(before.values())) < 200, (len(keep), before)
    # What is left free is at most one fresh pool per class: the one the allocations made
    # after the fill (the fill's own loop, the statistics' reading) started.
    over = {size: n for size, n in after.items() if n > POOL // size}
    assert over == {}, f"free blocks left in older pools: {over} (before: {before})"
    assert sum(after.values()) < sum(before.values()) or sum(before.values()) < 2000


def test_filling_takes_mallocs_small_free_chunks() -> None:
    before = zygote_heap.malloc_free_chunks()
    if not before:
        pytest.skip("no glibc malloc_info report here")
    taken = zygote_heap.fill_malloc_chunks()
    assert all(taken), "every filler allocation succeeded"
    after = zygote_heap.malloc_free_chunks()
    # The fill's own bookkeeping may free a chunk or two; the scattered ones are gone.
    assert sum(after.values()) <= max(20, sum(before.values()) // 10), (before, after)
